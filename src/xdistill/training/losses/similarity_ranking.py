"""Ranking distillation: the teacher's order of sentence-pair similarities taught with CoSENT (Su 2022)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Self

import torch
from torch import Tensor

from xdistill.training.losses.base import DistillationLoss
from xdistill.training.losses.util import check_pair_shapes, cosine_similarity_matrix


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
    check_pair_shapes(student_src, student_tgt, teacher_src)
    teacher = cosine_similarity_matrix(teacher_src, teacher_src)
    teacher_upper = _upper_pairs(teacher)  # en-en and xx-xx pairs share the order of their English sources
    off_diagonal = ~torch.eye(len(teacher), dtype=torch.bool, device=teacher.device)
    families = [
        (_upper_pairs(cosine_similarity_matrix(student_src, student_src)), teacher_upper),
        (_upper_pairs(cosine_similarity_matrix(student_tgt, student_tgt)), teacher_upper),
        (cosine_similarity_matrix(student_tgt, student_src)[off_diagonal], teacher[off_diagonal]),
    ]
    return torch.stack([cosent_loss(student, target, scale) for student, target in families]).mean()


class SimilarityRankingLoss(DistillationLoss):
    """:func:`similarity_ranking_loss`, an in-batch loss (params.yaml ``train.loss.similarity_ranking``, with
    ``ranking_scale``)."""

    name = "similarity_ranking"
    in_batch = True

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    @classmethod
    def build(cls, settings: Mapping[str, float], student_dim: int, teacher_dim: int) -> Self:
        return cls(settings["ranking_scale"])

    def forward(self, student_src: Tensor, student_tgt: Tensor, teacher_src: Tensor) -> Tensor:
        return similarity_ranking_loss(student_src, student_tgt, teacher_src, self.scale)
