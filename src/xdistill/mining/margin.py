"""Margin-based bitext mining (Artetxe & Schwenk 2019, "Margin-based parallel corpus mining").

For a source sentence x and a target sentence y with cosine similarity ``cos(x, y)`` the margin
score compares that similarity with the average similarity of each side to its k nearest
neighbours on the other side::

    avg(x, y) = (mean_{z in NN_k(x)} cos(x, z) + mean_{z in NN_k(y)} cos(y, z)) / 2
    absolute: cos(x, y)
    distance: cos(x, y) - avg(x, y)
    ratio:    cos(x, y) / avg(x, y)

Candidates are the k nearest neighbours in both directions. Retrieval picks pairs from them:

- ``fwd``: every source sentence with its best-scoring target candidate;
- ``bwd``: every target sentence with its best-scoring source candidate;
- ``max``: the union of both, kept one-to-one greedily by decreasing score (LASER's BUCC mode);
- ``intersect``: only pairs that are each other's best candidate in both directions.

Everything is array arithmetic: no Python loop runs per sentence or per candidate (the
one-to-one selection of ``max`` loops over rounds, each round resolving every conflict-free
pair at once, and hands chains of conflicts that would take many rounds to a sequential loop; see
:func:`greedy_one_to_one`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xdistill.errors import XdistillError
from xdistill.mining.knn import knn_search

MARGINS = ("ratio", "distance", "absolute")
# The ratio margin assumes a positive neighbourhood average (nearest neighbours of real sentence embeddings
# are similar). An average of 0 would give inf or NaN, and a negative one would reverse the order of the
# candidates (a higher cosine, a lower score). Below this floor the ratio keeps the cosine's order instead;
# a healthy average lies far above it, so its scores are exactly cosine / average.
RATIO_DENOMINATOR_FLOOR = 1e-6
RETRIEVALS = ("fwd", "bwd", "max", "intersect")


@dataclass(frozen=True)
class NeighbourLists:
    """k-NN results in both directions: source->target and target->source."""

    fwd_scores: np.ndarray  # (n_src, k) cosine of each source row to its target neighbours
    fwd_indices: np.ndarray  # (n_src, k) target row ids
    bwd_scores: np.ndarray  # (n_tgt, k) cosine of each target row to its source neighbours
    bwd_indices: np.ndarray  # (n_tgt, k) source row ids


@dataclass(frozen=True)
class MinedPairs:
    """Mined candidate pairs, sorted by decreasing margin score."""

    src: np.ndarray  # int64 source row ids
    tgt: np.ndarray  # int64 target row ids
    scores: np.ndarray  # float32 margin scores

    def __len__(self) -> int:
        return len(self.scores)

    def above(self, threshold: float) -> MinedPairs:
        """Pairs whose score reaches ``threshold`` (inclusive)."""
        keep = self.scores >= threshold
        return MinedPairs(self.src[keep], self.tgt[keep], self.scores[keep])


def check_choice(value: str, allowed: tuple[str, ...], what: str) -> None:
    if value not in allowed:
        raise XdistillError(f"unknown {what} {value!r}; choose one of {', '.join(allowed)}")


def margin_function(cosine: np.ndarray, average: np.ndarray, margin: str) -> np.ndarray:
    """Apply a margin to cosine similarities given the neighbourhood averages (same shape)."""
    check_choice(margin, MARGINS, "margin")
    if margin == "absolute":
        return cosine
    if margin == "distance":
        return cosine - average
    return cosine / np.maximum(average, RATIO_DENOMINATOR_FLOOR)  # NaN (no neighbourhood) stays NaN


def neighbour_means(scores: np.ndarray) -> np.ndarray:
    """Mean similarity of each row to its k nearest neighbours (missing IVF slots ignored); NaN for
    a row without any (an IVF search can find none: it has no neighbourhood, not one of mean 0)."""
    finite = np.isfinite(scores)
    counts = finite.sum(axis=1)
    sums = np.where(finite, scores, 0.0).sum(axis=1)
    return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def bidirectional_knn(
    src: np.ndarray, tgt: np.ndarray, k: int, *, index: str = "flat", **index_options
) -> NeighbourLists:
    """k nearest neighbours source->target and target->source (inner product = cosine)."""
    fwd_scores, fwd_indices = knn_search(src, tgt, k, index=index, **index_options)
    bwd_scores, bwd_indices = knn_search(tgt, src, k, index=index, **index_options)
    return NeighbourLists(fwd_scores, fwd_indices, bwd_scores, bwd_indices)


def score_candidates(
    cosine: np.ndarray,
    candidate_ids: np.ndarray,
    query_means: np.ndarray,
    candidate_means: np.ndarray,
    margin: str,
) -> np.ndarray:
    """Margin score of every (query, candidate) cell of a k-NN result, vectorised.

    ``cosine[i, j]`` is the similarity of query ``i`` to its candidate ``candidate_ids[i, j]``;
    missing candidates (id -1) score -inf.
    """
    valid = candidate_ids >= 0
    query_side, candidate_side = query_means[:, None], candidate_means[np.where(valid, candidate_ids, 0)]
    # a candidate without neighbours of its own: the query's neighbourhood alone (a mean of 0 would
    # shrink the ratio margin's denominator and make it a hub every query picks)
    average = np.where(np.isnan(candidate_side), query_side, (query_side + candidate_side) / 2)
    scores = margin_function(cosine.astype(np.float64), average, margin)
    return np.where(valid, scores, -np.inf)


def best_candidates(neighbours: NeighbourLists, margin: str) -> tuple[MinedPairs, MinedPairs]:
    """Best-scoring candidate of every source row (forward) and every target row (backward)."""
    src_means = neighbour_means(neighbours.fwd_scores)
    tgt_means = neighbour_means(neighbours.bwd_scores)
    forward = best_of_rows(neighbours.fwd_scores, neighbours.fwd_indices, src_means, tgt_means, margin, True)
    backward = best_of_rows(neighbours.bwd_scores, neighbours.bwd_indices, tgt_means, src_means, margin, False)
    return forward, backward


def best_of_rows(
    cosine: np.ndarray,
    candidate_ids: np.ndarray,
    query_means: np.ndarray,
    candidate_means: np.ndarray,
    margin: str,
    queries_are_src: bool,
    first_row: int = 0,
) -> MinedPairs:
    """Best-scoring candidate of each query row of a k-NN result: rows ``first_row`` onwards of their side, so
    blocks of rows scored apart (on cluster workers) concatenate to the result of all rows at once."""
    scores = score_candidates(cosine, candidate_ids, query_means, candidate_means, margin)
    return _row_best(scores, candidate_ids, queries_are_src=queries_are_src, first_row=first_row)


def concatenate_pairs(parts: list[MinedPairs]) -> MinedPairs:
    """Pairs of several blocks, in order, as one."""
    if not parts:
        empty = np.zeros(0, np.int64)
        return MinedPairs(empty, empty, np.zeros(0, np.float32))
    return MinedPairs(*(np.concatenate([getattr(part, name) for part in parts]) for name in ("src", "tgt", "scores")))


def _row_best(
    scores: np.ndarray, candidate_ids: np.ndarray, *, queries_are_src: bool, first_row: int = 0
) -> MinedPairs:
    """For each query row, its highest-scoring candidate (rows without any candidate dropped)."""
    rows = np.arange(scores.shape[0])
    if scores.shape[1] == 0:
        empty = np.zeros(0, np.int64)
        return MinedPairs(empty, empty, np.zeros(0, np.float32))
    # argmax would pick a NaN (or +inf) cell and the row would then be dropped: a row keeps its best finite one
    scores = np.where(np.isfinite(scores), scores, -np.inf)
    best = np.argmax(scores, axis=1)
    best_scores = scores[rows, best]
    best_ids = candidate_ids[rows, best]
    keep = np.isfinite(best_scores)
    queries, partners = rows[keep].astype(np.int64) + first_row, best_ids[keep].astype(np.int64)
    src, tgt = (queries, partners) if queries_are_src else (partners, queries)
    return MinedPairs(src, tgt, best_scores[keep].astype(np.float32))


def sort_pairs(src: np.ndarray, tgt: np.ndarray, scores: np.ndarray) -> MinedPairs:
    """Pairs sorted by decreasing score; ties by (src, tgt) so the order is deterministic."""
    order = np.lexsort((tgt, src, -scores))
    return MinedPairs(src[order], tgt[order], scores[order])


VECTORISED_ROUNDS = 16  # random candidates settle in ~4 rounds; past this, conflicts chain (see below)


def greedy_one_to_one(pairs: MinedPairs) -> MinedPairs:
    """Keep pairs one-to-one, highest score first (the result of LASER's sequential loop).

    Sequential rule: walk the pairs by decreasing score, keep a pair when neither its source nor
    its target is already used. Vectorised by rounds: a pair that ranks first among the
    remaining pairs of its source *and* of its target is kept by the sequential rule too, so each
    round keeps all such pairs at once and drops the remaining pairs that touch them. After
    ``VECTORISED_ROUNDS`` rounds the rest goes through the sequential loop.
    """
    pairs = sort_pairs(pairs.src, pairs.tgt, pairs.scores)
    # identical (src, tgt) candidates found in both directions carry the same score: keep one
    _, first = np.unique(pairs.src * (int(pairs.tgt.max(initial=0)) + 1) + pairs.tgt, return_index=True)
    rank = np.sort(first)  # positions in score order of the distinct pairs
    src, tgt = pairs.src[rank], pairs.tgt[rank]
    alive = np.ones(len(rank), bool)
    kept = np.zeros(len(rank), bool)
    for _ in range(VECTORISED_ROUNDS):
        if not alive.any():
            break
        live = np.flatnonzero(alive)  # ascending position = descending score
        best_of_src = _first_per_group(src[live])
        best_of_tgt = _first_per_group(tgt[live])
        winners = live[best_of_src & best_of_tgt]
        kept[winners] = True
        used_src = np.zeros(int(src.max()) + 1, bool)
        used_tgt = np.zeros(int(tgt.max()) + 1, bool)
        used_src[src[winners]] = True
        used_tgt[tgt[winners]] = True
        alive &= ~(used_src[src] | used_tgt[tgt])
    _sequential_rule(src, tgt, alive, kept)
    chosen = rank[kept]
    return MinedPairs(pairs.src[chosen], pairs.tgt[chosen], pairs.scores[chosen])


def _sequential_rule(src: np.ndarray, tgt: np.ndarray, alive: np.ndarray, kept: np.ndarray) -> None:
    """The sequential rule on the pairs still ``alive`` (in score order), marking them in ``kept``.

    Rounds left over happen only where conflicts chain (each pair outranked on one side by the
    next): a round then settles one pair, and this loop is cheaper than the remaining rounds.
    """
    used_src: set[int] = set()
    used_tgt: set[int] = set()
    for position in np.flatnonzero(alive).tolist():
        source, target = int(src[position]), int(tgt[position])
        if source not in used_src and target not in used_tgt:
            kept[position] = True
            used_src.add(source)
            used_tgt.add(target)


def _first_per_group(keys: np.ndarray) -> np.ndarray:
    """Mask of the first occurrence of each key (the best-ranked pair of that sentence)."""
    mask = np.zeros(len(keys), bool)
    _, first = np.unique(keys, return_index=True)
    mask[first] = True
    return mask


def retrieve(forward: MinedPairs, backward: MinedPairs, retrieval: str) -> MinedPairs:
    """Combine per-row best candidates of both directions into the mined pairs."""
    check_choice(retrieval, RETRIEVALS, "retrieval")
    if retrieval == "fwd":
        return sort_pairs(forward.src, forward.tgt, forward.scores)
    if retrieval == "bwd":
        return sort_pairs(backward.src, backward.tgt, backward.scores)
    if retrieval == "intersect":
        # a forward pair (x, y) is mutual when y's backward best is x
        n_tgt = int(max(forward.tgt.max(initial=-1), backward.tgt.max(initial=-1))) + 1
        backward_partner = np.full(n_tgt, -1, np.int64)
        backward_partner[backward.tgt] = backward.src
        mutual = backward_partner[forward.tgt] == forward.src
        return sort_pairs(forward.src[mutual], forward.tgt[mutual], forward.scores[mutual])
    return greedy_one_to_one(concatenate_pairs([forward, backward]))


def mine_from_neighbours(neighbours: NeighbourLists, *, margin: str = "ratio", retrieval: str = "max") -> MinedPairs:
    """Margin-score the k-NN candidates of both directions and retrieve pairs."""
    check_choice(margin, MARGINS, "margin")
    check_choice(retrieval, RETRIEVALS, "retrieval")
    forward, backward = best_candidates(neighbours, margin)
    return retrieve(forward, backward, retrieval)


def mine_embeddings(
    src: np.ndarray,
    tgt: np.ndarray,
    *,
    k: int = 4,
    margin: str = "ratio",
    retrieval: str = "max",
    index: str = "flat",
    **index_options,
) -> MinedPairs:
    """Mine candidate pairs between two in-memory embedding matrices (rows L2-normalised)."""
    check_choice(margin, MARGINS, "margin")
    check_choice(retrieval, RETRIEVALS, "retrieval")
    neighbours = bidirectional_knn(src, tgt, k, index=index, **index_options)
    return mine_from_neighbours(neighbours, margin=margin, retrieval=retrieval)
