"""LaBSE's additive margin softmax: bidirectional in-batch translation ranking with a margin."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Self

import torch
from torch import Tensor

from xdistill.training.losses.base import DistillationLoss
from xdistill.training.losses.util import cosine_similarity_matrix, in_batch_ranking_loss, same_source_mask


def additive_margin_softmax_loss(
    src: Tensor, tgt: Tensor, margin: float, scale: float, same: Tensor | None = None
) -> Tensor:
    """LaBSE's bidirectional in-batch translation ranking with an additive margin.

    Logits ``scale * (cos(src_i, tgt_j) - margin * [i == j])``; cross-entropy with the true
    translation as the class, averaged over the batch, summed over src->tgt and tgt->src; pairs
    marked in ``same`` (:func:`~xdistill.training.losses.util.same_source_mask`) are no negatives of each other.
    """
    if src.shape != tgt.shape:
        raise ValueError(f"src {tuple(src.shape)} and tgt {tuple(tgt.shape)} must have the same shape")
    cosines = cosine_similarity_matrix(src, tgt)
    logits = scale * (cosines - margin * torch.eye(len(src), dtype=cosines.dtype, device=cosines.device))
    return in_batch_ranking_loss(logits, same)


class AdditiveMarginSoftmaxLoss(DistillationLoss):
    """:func:`additive_margin_softmax_loss` of the student's two sides, pairs that share their English source
    (by the teacher's vectors) no negatives of each other; an in-batch loss (params.yaml
    ``train.loss.additive_margin_softmax``, with ``margin`` and ``scale``)."""

    name = "additive_margin_softmax"
    in_batch = True

    def __init__(self, margin: float, scale: float) -> None:
        super().__init__()
        self.margin, self.scale = margin, scale

    @classmethod
    def build(cls, settings: Mapping[str, float], student_dim: int, teacher_dim: int) -> Self:
        return cls(settings["margin"], settings["scale"])

    def forward(self, student_src: Tensor, student_tgt: Tensor, teacher_src: Tensor) -> Tensor:
        same = same_source_mask(teacher_src)
        return additive_margin_softmax_loss(student_src, student_tgt, self.margin, self.scale, same)
