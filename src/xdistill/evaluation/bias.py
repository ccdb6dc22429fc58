"""Language bias (Reimers & Gurevych 2020, Table 8).

A model scores each STS set (en-en, de-de, en-de, ...) on its own; the *expected* score of the
joined set is the mean of those scores. Joining every set into one and ranking all pairs
together gives the *actual* score. A model that rates same-language pairs systematically higher
than cross-language pairs (language bias) ranks the joined set worse than its per-set quality
predicts, so ``actual - expected`` drops below zero.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from xdistill.errors import XdistillError
from xdistill.evaluation.metrics import mean_or_nan, spearman_x100


def language_bias(
    set_names: Sequence[str], predictions: Sequence[np.ndarray], golds: Sequence[np.ndarray]
) -> dict[str, float | dict[str, float]]:
    """Expected (mean of per-set Spearman x 100), actual (joined set) and their difference."""
    if not (len(set_names) == len(predictions) == len(golds)) or not set_names:
        raise XdistillError("language bias needs one prediction and one gold array per set, and at least one set")
    per_set = {name: spearman_x100(pred, gold) for name, pred, gold in zip(set_names, predictions, golds)}
    # a set whose gold scores rank nothing (NaN) is not measured: it drops out, as in every other average
    expected = mean_or_nan(list(per_set.values()))
    actual = spearman_x100(
        np.concatenate([np.ravel(p) for p in predictions]), np.concatenate([np.ravel(g) for g in golds])
    )
    return {"expected": expected, "actual": actual, "difference": actual - expected, "per_set": per_set}
