"""The scoring primitives of every STS benchmark: paired cosine and Spearman x 100."""

from __future__ import annotations

import numpy as np
from scipy.stats import rankdata

from xdistill.errors import XdistillError


def spearman_x100(predicted: np.ndarray, gold: np.ndarray) -> float:
    """Spearman rank correlation x 100 (the STS convention), ties given their average rank.

    Spearman is Pearson's correlation of the ranks; tied values share the mean of the ranks
    they span (as SemEval's scorer and ``scipy.stats.spearmanr`` do). A constant input has no
    ranking, so the correlation is undefined: NaN, not an exception, so one degenerate set does
    not stop a whole evaluation run.
    """
    predicted = np.asarray(predicted, dtype=np.float64).ravel()
    gold = np.asarray(gold, dtype=np.float64).ravel()
    if predicted.shape != gold.shape:
        raise XdistillError(f"spearman: {predicted.size} predictions for {gold.size} gold scores")
    if predicted.size < 2:
        raise XdistillError("spearman: needs at least two pairs")
    rank_predicted = rankdata(predicted) - (predicted.size + 1) / 2
    rank_gold = rankdata(gold) - (gold.size + 1) / 2
    denominator = np.sqrt(np.sum(rank_predicted**2) * np.sum(rank_gold**2))
    if denominator == 0:
        return float("nan")
    return float(100.0 * np.sum(rank_predicted * rank_gold) / denominator)


def paired_cosine(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Cosine similarity of row i of ``first`` with row i of ``second`` (rows need not be normalised)."""
    first = np.asarray(first, dtype=np.float64)
    second = np.asarray(second, dtype=np.float64)
    if first.shape != second.shape:
        raise XdistillError(f"paired cosine: shapes differ, {first.shape} vs {second.shape}")
    norms = np.linalg.norm(first, axis=1) * np.linalg.norm(second, axis=1)
    return np.sum(first * second, axis=1) / np.maximum(norms, 1e-12)


def mean_or_nan(values: list[float]) -> float:
    """Mean of the finite values; NaN when there is none (an average over nothing is undefined)."""
    finite = [v for v in values if v is not None and np.isfinite(v)]
    return float(np.mean(finite)) if finite else float("nan")
