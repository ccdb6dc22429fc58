"""The scoring primitives of every STS benchmark: paired cosine and Spearman x 100."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.stats import rankdata

from xdistill.errors import XdistillError


def spearman_x100(predicted: np.ndarray, gold: np.ndarray) -> float:
    """Spearman rank correlation x 100 (the STS convention), ties given their average rank.

    Spearman is Pearson's correlation of the ranks; tied values share the mean of the ranks
    they span (as SemEval's scorer and ``scipy.stats.spearmanr`` do). Degenerate inputs:

    - constant gold scores: the set ranks nothing, so the correlation is undefined: NaN. That
      holds for every model alike, and :func:`mean_or_nan` leaves such a set out of averages.
    - constant predictions (a collapsed model scores every pair alike): the model ranks nothing,
      so it agrees with none of the gold ranking: 0. NaN here would depend on the model, and
      dropping the set from an average could then raise a broken model's score.
    - non-finite predictions (NaN or inf embeddings): an error, not a score.
    """
    predicted = np.asarray(predicted, dtype=np.float64).ravel()
    gold = np.asarray(gold, dtype=np.float64).ravel()
    if predicted.shape != gold.shape:
        raise XdistillError(f"spearman: {predicted.size} predictions for {gold.size} gold scores")
    if predicted.size < 2:
        raise XdistillError("spearman: needs at least two pairs")
    if not np.isfinite(predicted).all():
        bad = int(np.sum(~np.isfinite(predicted)))
        raise XdistillError(f"spearman: {bad} of {predicted.size} predictions are not finite (NaN or inf embeddings)")
    rank_gold = rankdata(gold) - (gold.size + 1) / 2
    if not np.any(rank_gold):
        return float("nan")
    rank_predicted = rankdata(predicted) - (predicted.size + 1) / 2
    if not np.any(rank_predicted):
        return 0.0
    denominator = np.sqrt(np.sum(rank_predicted**2) * np.sum(rank_gold**2))
    return float(100.0 * np.sum(rank_predicted * rank_gold) / denominator)


def paired_cosine(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Cosine similarity of row i of ``first`` with row i of ``second`` (rows need not be normalised)."""
    first = np.asarray(first, dtype=np.float64)
    second = np.asarray(second, dtype=np.float64)
    if first.shape != second.shape:
        raise XdistillError(f"paired cosine: shapes differ, {first.shape} vs {second.shape}")
    norms = np.linalg.norm(first, axis=1) * np.linalg.norm(second, axis=1)
    return np.sum(first * second, axis=1) / np.maximum(norms, 1e-12)


def mean_or_nan(values: Sequence[float | None]) -> float:
    """Mean of the finite values; NaN when there is none (an average over nothing is undefined).

    None and NaN both mean "not measured" here (a benchmark not configured, a set whose gold scores
    rank nothing): they drop out. No benchmark score is NaN because of the model that was scored
    (:func:`spearman_x100` gives a collapsed model 0), so dropping one cannot raise a broken model's average.
    """
    finite = [v for v in values if v is not None and np.isfinite(v)]
    return float(np.mean(finite)) if finite else float("nan")
