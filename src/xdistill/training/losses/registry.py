"""Every distillation loss, by name: the one list the objective and the ``train.loss`` settings read.

The order is the order of the objective's sums and of its parts (pair losses first, then the in-batch ones),
so a new loss goes at the end.
"""

from __future__ import annotations

from xdistill.training.losses.additive_margin_softmax import AdditiveMarginSoftmaxLoss
from xdistill.training.losses.base import DistillationLoss
from xdistill.training.losses.feature_distillation import FeatureDistillationLoss
from xdistill.training.losses.logit_distillation import LogitDistillationLoss
from xdistill.training.losses.mse import MSELoss
from xdistill.training.losses.similarity_ranking import SimilarityRankingLoss

LOSSES: dict[str, type[DistillationLoss]] = {
    cls.name: cls
    for cls in (
        MSELoss,
        FeatureDistillationLoss,
        LogitDistillationLoss,
        AdditiveMarginSoftmaxLoss,
        SimilarityRankingLoss,
    )
}
LOSS_NAMES = tuple(LOSSES)
# the losses that compare each pair with the other pairs of its micro-batch (gathered from every process)
IN_BATCH_LOSSES = tuple(name for name, cls in LOSSES.items() if cls.in_batch)
