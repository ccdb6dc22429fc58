"""The distillation objective: the weighted sum of the active losses, computed the way DDP needs it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from xdistill.training.distributed import gather_with_local_grad, process_count
from xdistill.training.losses.base import DistillationLoss
from xdistill.training.losses.config import LossConfig
from xdistill.training.losses.feature_distillation import FeatureDistillationLoss
from xdistill.training.losses.registry import LOSSES


class DistillationObjective(nn.Module):
    """Weighted sum of the active losses (:data:`~xdistill.training.losses.registry.LOSSES` with a positive
    weight in ``config``); owns the feature-distillation projection.

    ``forward(student_src, student_tgt, teacher_src)`` returns ``(total, parts)``: ``total`` the
    weighted sum (a scalar with gradients), ``parts`` each active loss's unweighted value, detached.
    Save only the student for export: this module's parameters (the projection) are training-only.
    """

    def __init__(self, config: LossConfig | Mapping[str, Any] | None, student_dim: int, teacher_dim: int) -> None:
        super().__init__()
        self.config = config if isinstance(config, LossConfig) else LossConfig.from_mapping(config)
        self.student_dim, self.teacher_dim = int(student_dim), int(teacher_dim)
        settings = self.config.to_dict()
        terms = [LOSSES[name].build(settings, self.student_dim, self.teacher_dim) for name in self.config.active]
        # Plain tuples, not sub-modules: the objective's only weights are the projection, registered below under
        # the name the rest of training knows (alignment initialises it, validation maps through it, checkpoints
        # hold `projection.*`). A loss with weights of its own must be registered here the same way.
        self._pair_terms: tuple[DistillationLoss, ...] = tuple(term for term in terms if not term.in_batch)
        self._in_batch_terms: tuple[DistillationLoss, ...] = tuple(term for term in terms if term.in_batch)
        feature = next((term for term in terms if isinstance(term, FeatureDistillationLoss)), None)
        self.projection: nn.Linear | None = feature.projection if feature is not None else None
        owned = {id(t) for t in [*self.parameters(), *self.buffers()]}
        for term in terms:
            if any(id(t) not in owned for t in [*term.parameters(), *term.buffers()]):
                raise TypeError(f"loss {term.name} has weights the objective does not register (see its __init__)")

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
        # pair losses: a mean over this process's slice (DDP averages the slices)
        parts = {term.name: term(student_src, student_tgt, teacher_src) for term in self._pair_terms}
        in_batch: dict[str, Tensor] = {}
        if self._in_batch_terms:
            # in-batch losses compare each pair with the other pairs of the whole micro-batch
            gathered = [gather_with_local_grad(t) for t in (student_src, student_tgt, teacher_src)]
            in_batch = {term.name: term(*gathered) for term in self._in_batch_terms}
        total = sum(getattr(self.config, name) * value for name, value in parts.items())
        if in_batch:
            # Every process holds the same in-batch loss but gets its gradient on its own rows only; DDP then
            # averages over the processes, so the gradient is scaled by their count (the value stays the loss).
            count = process_count()
            in_batch_total = sum(getattr(self.config, name) * value for name, value in in_batch.items())
            total = total + in_batch_total * count - in_batch_total.detach() * (count - 1)
        return total, {name: value.detach() for name, value in {**parts, **in_batch}.items()}
