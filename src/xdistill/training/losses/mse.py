"""Reimers & Gurevych (2020): the student's embeddings of both sides of a pair pulled onto the teacher's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Self

import torch.nn.functional as F
from torch import Tensor

from xdistill.errors import XdistillError
from xdistill.training.losses.base import DistillationLoss
from xdistill.training.losses.util import check_pair_shapes


def mse_distillation_loss(student_src: Tensor, student_tgt: Tensor, teacher_src: Tensor) -> Tensor:
    """Reimers & Gurevych (2020): pull student(src) and student(tgt) onto teacher(src).

    ``(MSE(student_src, teacher_src) + MSE(student_tgt, teacher_src)) / 2``, each MSE the mean
    over all elements. Needs ``student dim == teacher dim``.
    """
    check_pair_shapes(student_src, student_tgt, teacher_src)
    if student_src.shape[1] != teacher_src.shape[1]:
        raise ValueError(
            f"MSE needs the student's dimension ({student_src.shape[1]}) to equal the teacher's "
            f"({teacher_src.shape[1]}); use feature distillation (a projection) for a smaller student"
        )
    return 0.5 * (F.mse_loss(student_src, teacher_src) + F.mse_loss(student_tgt, teacher_src))


class MSELoss(DistillationLoss):
    """:func:`mse_distillation_loss`, a pair loss (params.yaml ``train.loss.mse``)."""

    name = "mse"

    @classmethod
    def build(cls, settings: Mapping[str, float], student_dim: int, teacher_dim: int) -> Self:
        if student_dim != teacher_dim:
            raise XdistillError(
                f"loss mse needs the student's dimension ({student_dim}) to equal the teacher's "
                f"({teacher_dim}); use feature_distillation for a smaller student"
            )
        return cls()

    def forward(self, student_src: Tensor, student_tgt: Tensor, teacher_src: Tensor) -> Tensor:
        return mse_distillation_loss(student_src, student_tgt, teacher_src)
