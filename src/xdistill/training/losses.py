"""Distillation losses: Reimers & Gurevych MSE, the LEALLA / LaBSE objectives and a ranking distillation.

All functions take embeddings as ``[batch, dim]`` tensors where row ``i`` of ``student_src``
(English source), ``student_tgt`` (its translation) and ``teacher_src`` (the teacher's vector of
the source, from the teacher store) belong to the same translation pair.

Conventions (documented once, used everywhere):

- An "MSE" is :func:`torch.nn.functional.mse_loss`: the mean over every element.
- A loss over the two sides of a pair (src and tgt, or src->tgt and tgt->src) is the **mean**
  of the two for the MSE-type losses, as in Reimers & Gurevych: their code trains on
  ``(src, teacher(src))`` and ``(tgt, teacher(src))`` as separate examples of one MSE, and
  sentence-transformers' ``MSELoss`` averages its per-column MSEs; and the **sum** of the two
  directions for the additive margin softmax, as LaBSE defines its bidirectional loss.

:class:`DistillationObjective` combines any subset of the five with weights and owns the
trainable projection of feature distillation (the projection is never part of the exported student).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xdistill.config import SECTION_CONFIG, parse_section
from xdistill.errors import XdistillError
from xdistill.training.distributed import gather_with_local_grad, process_count

LOSS_NAMES = ("mse", "feature_distillation", "logit_distillation", "additive_margin_softmax", "similarity_ranking")
# the losses that compare each pair with the other pairs of its micro-batch (gathered from every process)
IN_BATCH_LOSSES = ("logit_distillation", "additive_margin_softmax", "similarity_ranking")


def _check_pair_shapes(student_src: Tensor, student_tgt: Tensor, teacher_src: Tensor) -> None:
    if student_src.shape != student_tgt.shape or student_src.shape[0] != teacher_src.shape[0]:
        raise ValueError(
            f"batch shapes disagree: student_src {tuple(student_src.shape)}, "
            f"student_tgt {tuple(student_tgt.shape)}, teacher_src {tuple(teacher_src.shape)}"
        )


def mse_distillation_loss(student_src: Tensor, student_tgt: Tensor, teacher_src: Tensor) -> Tensor:
    """Reimers & Gurevych (2020): pull student(src) and student(tgt) onto teacher(src).

    ``(MSE(student_src, teacher_src) + MSE(student_tgt, teacher_src)) / 2``, each MSE the mean
    over all elements. Needs ``student dim == teacher dim``.
    """
    _check_pair_shapes(student_src, student_tgt, teacher_src)
    if student_src.shape[1] != teacher_src.shape[1]:
        raise ValueError(
            f"MSE needs the student's dimension ({student_src.shape[1]}) to equal the teacher's "
            f"({teacher_src.shape[1]}); use feature distillation (a projection) for a smaller student"
        )
    return 0.5 * (F.mse_loss(student_src, teacher_src) + F.mse_loss(student_tgt, teacher_src))


def feature_distillation_loss(
    projection: nn.Module, student_src: Tensor, student_tgt: Tensor, teacher_src: Tensor
) -> Tensor:
    """LEALLA feature distillation: project the student (dim -> teacher dim), then the MSE above.

    ``projection`` is trainable and lives in the objective, so a low-dimensional student learns
    to carry the teacher's information without having to be the teacher's size.
    """
    return mse_distillation_loss(projection(student_src), projection(student_tgt), teacher_src)


def cosine_similarity_matrix(left: Tensor, right: Tensor) -> Tensor:
    """``[n, m]`` cosines between every row of ``left`` and every row of ``right``."""
    return F.normalize(left, dim=-1) @ F.normalize(right, dim=-1).T


def logit_distillation_loss(
    student_src: Tensor, student_tgt: Tensor, teacher_src: Tensor, temperature: float
) -> Tensor:
    """LEALLA logit distillation: match the in-batch similarity structure of the teacher.

    Teacher logits: ``cos(teacher_src_i, teacher_src_j) / T`` (the teacher is English-only, so its
    view of a translation is its view of the source); student logits:
    ``cos(student_src_i, student_tgt_j) / T``; the loss is the MSE between the two ``[n, n]``
    matrices. Works across dimensions (only cosines are compared).
    """
    _check_pair_shapes(student_src, student_tgt, teacher_src)
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    teacher_logits = cosine_similarity_matrix(teacher_src, teacher_src) / temperature
    student_logits = cosine_similarity_matrix(student_src, student_tgt) / temperature
    return F.mse_loss(student_logits, teacher_logits)


# Teacher vectors this close are one English sentence (the store embeds each text once): a pair repeated
# in the batch (sampling repeats small sources, length bucketing puts the copies side by side) or one
# source with translations into several languages.
SAME_SOURCE_COSINE = 1 - 1e-5


def same_source_mask(teacher_src: Tensor) -> Tensor:
    """``[n, n]``, True off the diagonal where two rows share their English source (their teacher vectors)."""
    same = cosine_similarity_matrix(teacher_src, teacher_src) >= SAME_SOURCE_COSINE
    return same & ~torch.eye(len(teacher_src), dtype=torch.bool, device=teacher_src.device)


def in_batch_ranking_loss(logits: Tensor, same: Tensor | None = None) -> Tensor:
    """Cross-entropy with the diagonal as the class, rows and columns (both directions), batch mean.

    ``same`` marks entries that are no negatives (another copy of the same pair): they are left out,
    instead of teaching the model to push a sentence away from its own translation.
    """
    if same is not None:
        logits = logits.masked_fill(same, float("-inf"))
    labels = torch.arange(len(logits), device=logits.device)
    return F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)


def additive_margin_softmax_loss(
    src: Tensor, tgt: Tensor, margin: float, scale: float, same: Tensor | None = None
) -> Tensor:
    """LaBSE's bidirectional in-batch translation ranking with an additive margin.

    Logits ``scale * (cos(src_i, tgt_j) - margin * [i == j])``; cross-entropy with the true
    translation as the class, averaged over the batch, summed over src->tgt and tgt->src; pairs
    marked in ``same`` (:func:`same_source_mask`) are no negatives of each other.
    """
    if src.shape != tgt.shape:
        raise ValueError(f"src {tuple(src.shape)} and tgt {tuple(tgt.shape)} must have the same shape")
    cosines = cosine_similarity_matrix(src, tgt)
    logits = scale * (cosines - margin * torch.eye(len(src), dtype=cosines.dtype, device=cosines.device))
    return in_batch_ranking_loss(logits, same)


def _upper_pairs(matrix: Tensor) -> Tensor:
    """The entries above the diagonal of a square matrix (each unordered pair of a set once)."""
    rows, cols = torch.triu_indices(len(matrix), len(matrix), offset=1, device=matrix.device)
    return matrix[rows, cols]


# Pairs of one family compared in one CoSENT term: the comparison matrix is quadratic in them (a batch of
# 32 has 992 xx-en pairs, ~1M comparisons; a GPU batch of 256 would have 65k, 4.3G), so larger
# families are scored on a random subset of this many pairs (the training seed fixes it).
MAX_RANKED_PAIRS = 2048


def cosent_loss(student_cosines: Tensor, teacher_cosines: Tensor, scale: float) -> Tensor:
    """CoSENT (Su 2022) with the teacher's cosines as the order: ``log(1 + sum exp(scale * (s_k - s_l)))``
    over every pair of pairs ``(k, l)`` that the teacher ranks ``t_l > t_k``.

    Only the order of the student's cosines counts, not their level, so a student whose cosines
    sit in another range (mE5's lie in [0.7, 1]) is not pushed to the teacher's range first.
    More than :data:`MAX_RANKED_PAIRS` pairs are scored on a random subset of that size.
    """
    if len(student_cosines) > MAX_RANKED_PAIRS:
        keep = torch.randperm(len(student_cosines), device=student_cosines.device)[:MAX_RANKED_PAIRS]
        student_cosines, teacher_cosines = student_cosines[keep], teacher_cosines[keep]
    differences = scale * (student_cosines[:, None] - student_cosines[None, :])
    ranked_below = teacher_cosines[:, None] < teacher_cosines[None, :]
    differences = differences.masked_fill(~ranked_below, float("-inf"))
    zero = torch.zeros(1, dtype=differences.dtype, device=differences.device)
    return torch.logsumexp(torch.cat([zero, differences.flatten()]), dim=0)


def similarity_ranking_loss(student_src: Tensor, student_tgt: Tensor, teacher_src: Tensor, scale: float) -> Tensor:
    """Distil how the teacher ranks sentence pairs by similarity, the quantity STS scores measure.

    Every pair of the batch's English sources (``en-en``), of their translations (``xx-xx``) and
    of a translation with another pair's source (``xx-en``) is scored by the student's cosine and
    ordered by the teacher's cosine of the two English sources; each family contributes one
    :func:`cosent_loss` and the loss is their mean. Works across dimensions (only cosines count).
    """
    _check_pair_shapes(student_src, student_tgt, teacher_src)
    teacher = cosine_similarity_matrix(teacher_src, teacher_src)
    teacher_upper = _upper_pairs(teacher)  # en-en and xx-xx pairs share the order of their English sources
    off_diagonal = ~torch.eye(len(teacher), dtype=torch.bool, device=teacher.device)
    families = [
        (_upper_pairs(cosine_similarity_matrix(student_src, student_src)), teacher_upper),
        (_upper_pairs(cosine_similarity_matrix(student_tgt, student_tgt)), teacher_upper),
        (cosine_similarity_matrix(student_tgt, student_src)[off_diagonal], teacher[off_diagonal]),
    ]
    return torch.stack([cosent_loss(student, target, scale) for student, target in families]).mean()


@dataclass(frozen=True)
class LossConfig:
    """Weights (0 = off) and hyper-parameters of the distillation objective.

    In params.yaml (the trainer's section), e.g. for a 128-d student::

        loss: {mse: 0.0, feature_distillation: 1.0, logit_distillation: 1.0,
               additive_margin_softmax: 0.1, temperature: 0.1, margin: 0.3, scale: 20.0}
    """

    __pydantic_config__ = SECTION_CONFIG

    mse: float = 1.0
    feature_distillation: float = 0.0
    logit_distillation: float = 0.0
    additive_margin_softmax: float = 0.0
    similarity_ranking: float = 0.0
    temperature: float = 0.1  # logit distillation; cosines / T
    margin: float = 0.3  # additive margin softmax, LaBSE's value
    scale: float = 20.0  # additive margin softmax; cosines in [-1, 1] need a scale to be sharp logits
    ranking_scale: float = 20.0  # similarity ranking (CoSENT's own default)

    def __post_init__(self) -> None:
        for name in LOSS_NAMES:
            if getattr(self, name) < 0:
                raise XdistillError(f"loss weight {name} must be >= 0, got {getattr(self, name)}")
        if not any(getattr(self, name) > 0 for name in LOSS_NAMES):
            raise XdistillError(f"every loss weight is 0; turn on at least one of {', '.join(LOSS_NAMES)}")
        if min(self.temperature, self.scale, self.ranking_scale) <= 0:
            raise XdistillError(
                f"temperature, scale and ranking_scale must be positive, got "
                f"{self.temperature}, {self.scale}, {self.ranking_scale}"
            )

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None) -> LossConfig:
        """Build from the ``train.loss`` params mapping (see :func:`xdistill.config.parse_section`)."""
        return parse_section(cls, values, "train.loss")

    @property
    def active(self) -> tuple[str, ...]:
        """Names of the losses with a positive weight, in a fixed order."""
        return tuple(name for name in LOSS_NAMES if getattr(self, name) > 0)

    @property
    def in_batch(self) -> tuple[str, ...]:
        """The active losses whose negatives are the other pairs of the same micro-batch slice."""
        return tuple(name for name in IN_BATCH_LOSSES if getattr(self, name) > 0)

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


class DistillationObjective(nn.Module):
    """Weighted sum of the active losses; owns the feature-distillation projection.

    ``forward(student_src, student_tgt, teacher_src)`` returns ``(total, parts)``: ``total`` the
    weighted sum (a scalar with gradients), ``parts`` each active loss's unweighted value, detached.
    Save only the student for export: this module's parameters (the projection) are training-only.
    """

    def __init__(self, config: LossConfig | Mapping[str, Any] | None, student_dim: int, teacher_dim: int) -> None:
        super().__init__()
        self.config = config if isinstance(config, LossConfig) else LossConfig.from_mapping(config)
        self.student_dim, self.teacher_dim = int(student_dim), int(teacher_dim)
        if self.config.mse > 0 and self.student_dim != self.teacher_dim:
            raise XdistillError(
                f"loss mse needs the student's dimension ({self.student_dim}) to equal the teacher's "
                f"({self.teacher_dim}); use feature_distillation for a smaller student"
            )
        self.projection: nn.Linear | None = (
            nn.Linear(self.student_dim, self.teacher_dim) if self.config.feature_distillation > 0 else None
        )

    def forward(
        self, student_src: Tensor, student_tgt: Tensor, teacher_src: Tensor
    ) -> tuple[Tensor, dict[str, Tensor]]:
        # Losses in float32 even under bf16 autocast: cosines / T, scale * cosines and the duplicate mask
        # (teacher cosine > 0.9999) need the precision. `.float()` alone is not enough: autocast would
        # still run every matmul and the projection in bf16 (steps of ~0.004 near cosine 1).
        with torch.autocast(device_type=student_src.device.type, enabled=False):
            return self._losses(student_src.float(), student_tgt.float(), teacher_src.float())

    def _losses(
        self, student_src: Tensor, student_tgt: Tensor, teacher_src: Tensor
    ) -> tuple[Tensor, dict[str, Tensor]]:
        parts = self._pair_losses(student_src, student_tgt, teacher_src)
        in_batch: dict[str, Tensor] = {}
        if self.config.in_batch:
            gathered = (gather_with_local_grad(t) for t in (student_src, student_tgt, teacher_src))
            in_batch = self._in_batch_losses(*gathered)
        total = sum(getattr(self.config, name) * value for name, value in parts.items())
        if in_batch:
            # Every process holds the same in-batch loss but gets its gradient on its own rows only; DDP then
            # averages over the processes, so the gradient is scaled by their count (the value stays the loss).
            count = process_count()
            in_batch_total = sum(getattr(self.config, name) * value for name, value in in_batch.items())
            total = total + in_batch_total * count - in_batch_total.detach() * (count - 1)
        return total, {name: value.detach() for name, value in {**parts, **in_batch}.items()}

    def _pair_losses(self, student_src: Tensor, student_tgt: Tensor, teacher_src: Tensor) -> dict[str, Tensor]:
        """The losses of each pair on its own (a mean over this process's slice; DDP averages the slices)."""
        parts: dict[str, Tensor] = {}
        if self.config.mse > 0:
            parts["mse"] = mse_distillation_loss(student_src, student_tgt, teacher_src)
        if self.projection is not None:
            parts["feature_distillation"] = feature_distillation_loss(
                self.projection, student_src, student_tgt, teacher_src
            )
        return parts

    def _in_batch_losses(self, student_src: Tensor, student_tgt: Tensor, teacher_src: Tensor) -> dict[str, Tensor]:
        """The losses that compare each pair with the other pairs of the whole micro-batch."""
        parts: dict[str, Tensor] = {}
        if self.config.logit_distillation > 0:
            parts["logit_distillation"] = logit_distillation_loss(
                student_src, student_tgt, teacher_src, self.config.temperature
            )
        if self.config.additive_margin_softmax > 0:
            parts["additive_margin_softmax"] = additive_margin_softmax_loss(
                student_src, student_tgt, self.config.margin, self.config.scale, same_source_mask(teacher_src)
            )
        if self.config.similarity_ranking > 0:
            parts["similarity_ranking"] = similarity_ranking_loss(
                student_src, student_tgt, teacher_src, self.config.ranking_scale
            )
        return parts
