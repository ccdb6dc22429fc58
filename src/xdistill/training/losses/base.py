"""The interface every distillation loss implements (:class:`DistillationLoss`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import ClassVar, Self

from torch import Tensor, nn


class DistillationLoss(nn.Module, ABC):
    """One distillation loss: ``forward(student_src, student_tgt, teacher_src)`` returns a scalar tensor.

    Row ``i`` of the three ``[batch, dim]`` tensors is one translation pair: the student's embedding of
    the English source, the student's embedding of its translation, the teacher's vector of the source.

    ``name`` is the loss's key in params.yaml's ``train.loss`` (its weight) and in the objective's parts.
    ``in_batch`` says whether the loss compares each pair with the other pairs of its batch (ranking,
    similarity structure): the objective computes those on the whole micro-batch, gathered from every
    process, and the others (pair losses) on each process's own slice.
    """

    name: ClassVar[str]
    in_batch: ClassVar[bool] = False

    @classmethod
    def build(cls, settings: Mapping[str, float], student_dim: int, teacher_dim: int) -> Self:
        """The loss configured from ``settings`` (the ``train.loss`` values, :class:`~.config.LossConfig`) for a
        student of ``student_dim`` distilled into a teacher of ``teacher_dim``. A loss that reads settings,
        or needs the dimensions, overrides this."""
        return cls()

    @abstractmethod
    def forward(self, student_src: Tensor, student_tgt: Tensor, teacher_src: Tensor) -> Tensor:
        """The loss of the batch, a scalar tensor."""
