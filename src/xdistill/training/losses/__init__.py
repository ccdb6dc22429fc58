"""Distillation losses: Reimers & Gurevych MSE, the LEALLA / LaBSE objectives and a ranking distillation.

Laid out as sentence-transformers' ``losses``: one file per loss, named after its key in params.yaml's
``train.loss``, each a :class:`~xdistill.training.losses.base.DistillationLoss` (its function too, for use on
its own); :mod:`~xdistill.training.losses.registry` lists them, :mod:`~xdistill.training.losses.config` is
the ``train.loss`` section, :class:`~xdistill.training.losses.objective.DistillationObjective` their
weighted sum.

Every loss takes embeddings as ``[batch, dim]`` tensors where row ``i`` of ``student_src`` (English source),
``student_tgt`` (its translation) and ``teacher_src`` (the teacher's vector of the source, from the teacher
store) belong to the same translation pair.

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

from xdistill.training.losses.additive_margin_softmax import AdditiveMarginSoftmaxLoss, additive_margin_softmax_loss
from xdistill.training.losses.base import DistillationLoss
from xdistill.training.losses.config import LossConfig
from xdistill.training.losses.feature_distillation import FeatureDistillationLoss, feature_distillation_loss
from xdistill.training.losses.logit_distillation import LogitDistillationLoss, logit_distillation_loss
from xdistill.training.losses.mse import MSELoss, mse_distillation_loss
from xdistill.training.losses.objective import DistillationObjective
from xdistill.training.losses.registry import IN_BATCH_LOSSES, LOSS_NAMES, LOSSES
from xdistill.training.losses.similarity_ranking import (
    MAX_RANKED_PAIRS,
    SimilarityRankingLoss,
    cosent_loss,
    similarity_ranking_loss,
)
from xdistill.training.losses.util import (
    SAME_SOURCE_COSINE,
    cosine_similarity_matrix,
    in_batch_ranking_loss,
    same_source_mask,
)

__all__ = [
    "IN_BATCH_LOSSES",
    "LOSSES",
    "LOSS_NAMES",
    "MAX_RANKED_PAIRS",
    "SAME_SOURCE_COSINE",
    "AdditiveMarginSoftmaxLoss",
    "DistillationLoss",
    "DistillationObjective",
    "FeatureDistillationLoss",
    "LogitDistillationLoss",
    "LossConfig",
    "MSELoss",
    "SimilarityRankingLoss",
    "additive_margin_softmax_loss",
    "cosent_loss",
    "cosine_similarity_matrix",
    "feature_distillation_loss",
    "in_batch_ranking_loss",
    "logit_distillation_loss",
    "mse_distillation_loss",
    "same_source_mask",
    "similarity_ranking_loss",
]
