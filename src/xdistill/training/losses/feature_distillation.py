"""LEALLA feature distillation: the MSE of Reimers & Gurevych through a trainable projection to the teacher."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Self

from torch import Tensor, nn

from xdistill.training.losses.base import DistillationLoss
from xdistill.training.losses.mse import mse_distillation_loss


def feature_distillation_loss(
    projection: nn.Module, student_src: Tensor, student_tgt: Tensor, teacher_src: Tensor
) -> Tensor:
    """LEALLA feature distillation: project the student (dim -> teacher dim), then :func:`mse_distillation_loss`.

    ``projection`` is trainable and trained with the student, so a low-dimensional student learns
    to carry the teacher's information without having to be the teacher's size.
    """
    return mse_distillation_loss(projection(student_src), projection(student_tgt), teacher_src)


class FeatureDistillationLoss(DistillationLoss):
    """:func:`feature_distillation_loss` through its own ``projection`` (student dim -> teacher dim), a pair loss
    (params.yaml ``train.loss.feature_distillation``). The projection is training-only: never exported."""

    name = "feature_distillation"

    def __init__(self, student_dim: int, teacher_dim: int) -> None:
        super().__init__()
        self.projection = nn.Linear(student_dim, teacher_dim)

    @classmethod
    def build(cls, settings: Mapping[str, float], student_dim: int, teacher_dim: int) -> Self:
        return cls(student_dim, teacher_dim)

    def forward(self, student_src: Tensor, student_tgt: Tensor, teacher_src: Tensor) -> Tensor:
        return feature_distillation_loss(self.projection, student_src, student_tgt, teacher_src)
