"""LEALLA logit distillation: the student's in-batch cosine structure matched to the teacher's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Self

import torch.nn.functional as F
from torch import Tensor

from xdistill.training.losses.base import DistillationLoss
from xdistill.training.losses.util import check_pair_shapes, cosine_similarity_matrix


def logit_distillation_loss(
    student_src: Tensor, student_tgt: Tensor, teacher_src: Tensor, temperature: float
) -> Tensor:
    """LEALLA logit distillation: match the in-batch similarity structure of the teacher.

    Teacher logits: ``cos(teacher_src_i, teacher_src_j) / T`` (the teacher is English-only, so its
    view of a translation is its view of the source); student logits:
    ``cos(student_src_i, student_tgt_j) / T``; the loss is the MSE between the two ``[n, n]``
    matrices. Works across dimensions (only cosines are compared).
    """
    check_pair_shapes(student_src, student_tgt, teacher_src)
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    teacher_logits = cosine_similarity_matrix(teacher_src, teacher_src) / temperature
    student_logits = cosine_similarity_matrix(student_src, student_tgt) / temperature
    return F.mse_loss(student_logits, teacher_logits)


class LogitDistillationLoss(DistillationLoss):
    """:func:`logit_distillation_loss`, an in-batch loss (params.yaml ``train.loss.logit_distillation``,
    with ``temperature``)."""

    name = "logit_distillation"
    in_batch = True

    def __init__(self, temperature: float) -> None:
        super().__init__()
        self.temperature = temperature

    @classmethod
    def build(cls, settings: Mapping[str, float], student_dim: int, teacher_dim: int) -> Self:
        return cls(settings["temperature"])

    def forward(self, student_src: Tensor, student_tgt: Tensor, teacher_src: Tensor) -> Tensor:
        return logit_distillation_loss(student_src, student_tgt, teacher_src, self.temperature)
