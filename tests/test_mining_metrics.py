"""Mining metrics on tiny hand-computed cases: k-NN, retrieval accuracy, margins, retrieval
modes, threshold tuning, precision/recall/F1."""

from __future__ import annotations

import numpy as np
import pytest

from xdistill.errors import XdistillError
from xdistill.mining.bucc import BuccSplit, evaluate_split_pairs, precision_recall_f1, tune_threshold
from xdistill.mining.knn import knn_search, retrieval_accuracy
from xdistill.mining.margin import (
    MinedPairs,
    NeighbourLists,
    _row_best,
    best_candidates,
    greedy_one_to_one,
    margin_function,
    mine_embeddings,
    mine_from_neighbours,
    sort_pairs,
)


def neighbours_of(similarity: np.ndarray, k: int) -> NeighbourLists:
    """k-NN lists read off a hand-written similarity matrix (rows: source, columns: target)."""
    fwd_ids = np.argsort(-similarity, axis=1, kind="stable")[:, :k]
    bwd_ids = np.argsort(-similarity.T, axis=1, kind="stable")[:, :k]
    return NeighbourLists(
        np.take_along_axis(similarity, fwd_ids, 1), fwd_ids, np.take_along_axis(similarity.T, bwd_ids, 1), bwd_ids
    )


def as_set(pairs: MinedPairs) -> set[tuple[int, int]]:
    return set(zip(pairs.src.tolist(), pairs.tgt.tolist()))


# --- k-NN and retrieval accuracy ------------------------------------------------------------


def test_knn_search_exact_scores_and_order():
    queries = np.array([[1.0, 0.0], [0.6, 0.8]], np.float32)
    corpus = np.array([[1.0, 0.0], [0.0, 1.0], [0.8, 0.6]], np.float32)
    scores, ids = knn_search(queries, corpus, 2)
    # q0 . corpus = [1, 0, 0.8]; q1 . corpus = [0.6, 0.8, 0.96]
    np.testing.assert_array_equal(ids, [[0, 2], [2, 1]])
    np.testing.assert_allclose(scores, [[1.0, 0.8], [0.96, 0.8]], rtol=1e-6)


def test_knn_search_clamps_k_and_rejects_bad_input():
    scores, ids = knn_search(np.eye(2, dtype=np.float32), np.eye(2, dtype=np.float32), 5)
    assert ids.shape == (2, 2)
    np.testing.assert_array_equal(ids[:, 0], [0, 1])
    with pytest.raises(XdistillError, match="dimension mismatch"):
        knn_search(np.ones((1, 3)), np.ones((2, 2)), 1)
    with pytest.raises(XdistillError, match="k must be"):
        knn_search(np.ones((1, 2)), np.ones((2, 2)), 0)


def test_knn_search_refuses_non_finite_embeddings():
    # faiss gives a NaN query id -1: retrieval counted a miss and mining dropped the row, without a word
    good = np.eye(3, dtype=np.float32)
    nan_rows = good.copy()
    nan_rows[[0, 2], 1] = np.nan
    with pytest.raises(XdistillError, match="queries: 2 of 3 embedding rows are not finite"):
        knn_search(nan_rows, good, 1)
    inf_row = good.copy()
    inf_row[1, 0] = np.inf
    with pytest.raises(XdistillError, match="corpus: 1 of 3 embedding rows are not finite"):
        knn_search(good, inf_row, 1)
    with pytest.raises(XdistillError, match="not finite"):
        retrieval_accuracy(good, nan_rows)  # inf or NaN stays non-finite through the normalisation
    with pytest.raises(XdistillError, match="not finite"):
        mine_embeddings(good, nan_rows, k=2)


def test_knn_search_ivf_finds_exact_neighbours_of_noisy_copies():
    rng = np.random.default_rng(0)
    corpus = rng.normal(size=(3000, 16)).astype(np.float32)
    corpus /= np.linalg.norm(corpus, axis=1, keepdims=True)
    queries = corpus + 0.05 * rng.normal(size=corpus.shape).astype(np.float32)
    _, exact = knn_search(queries, corpus, 1)
    _, approx = knn_search(queries, corpus, 1, index="ivf", nprobe=8)
    assert np.mean(exact[:, 0] == np.arange(3000)) == 1.0
    assert np.mean(approx[:, 0] == exact[:, 0]) > 0.95


def test_retrieval_accuracy_both_directions():
    # src->tgt: s0 [1,0] vs t=[0.6, 0] -> t0 (right); s1 [0,1] vs [0.8, 1] -> t1 (right)  => 1.0
    # tgt->src: t0 [.6,.8] vs s=[0.6, 0.8] -> s1 (wrong); t1 [0,1] -> s1 (right)           => 0.5
    src = np.array([[3.0, 0.0], [0.0, 2.0]])  # not normalised on purpose: cosine is used
    tgt = np.array([[0.6, 0.8], [0.0, 1.0]])
    assert retrieval_accuracy(src, tgt) == (1.0, 0.5)
    with pytest.raises(XdistillError, match="same shape"):
        retrieval_accuracy(src, tgt[:1])


# --- margins ---------------------------------------------------------------------------------

SIMILARITY_2X2 = np.array([[0.9, 0.5], [0.6, 0.8]])
# k = 2: source means x0 0.7, x1 0.7; target means y0 0.75, y1 0.65
# averages: (x0,y0) 0.725, (x0,y1) 0.675, (x1,y0) 0.725, (x1,y1) 0.675


@pytest.mark.parametrize(
    ("margin", "expected"),
    [
        ("absolute", {(0, 0): 0.9, (1, 1): 0.8}),
        ("distance", {(0, 0): 0.9 - 0.725, (1, 1): 0.8 - 0.675}),
        ("ratio", {(0, 0): 0.9 / 0.725, (1, 1): 0.8 / 0.675}),
    ],
)
def test_margin_variants_hand_computed(margin, expected):
    forward, backward = best_candidates(neighbours_of(SIMILARITY_2X2, 2), margin)
    assert {(s, t): v for s, t, v in zip(forward.src, forward.tgt, forward.scores)} == pytest.approx(expected)
    assert {(s, t): v for s, t, v in zip(backward.src, backward.tgt, backward.scores)} == pytest.approx(expected)


def test_margin_changes_the_winner():
    # x0 is a "hub": close to everything. absolute picks (x0, y1) = 0.8 over (x1, y1) = 0.7;
    # ratio discounts the hub: x0's mean is 0.85, x1's 0.4 -> (x1, y1) wins.
    similarity = np.array([[0.9, 0.8], [0.1, 0.7]])
    neighbours = neighbours_of(similarity, 2)
    assert as_set(mine_from_neighbours(neighbours, margin="absolute", retrieval="bwd")) == {(0, 0), (0, 1)}
    # y0 mean 0.5, y1 mean 0.75: (x0,y1) 0.8/0.8 = 1.0; (x1,y1) 0.7/0.575 = 1.217
    assert as_set(mine_from_neighbours(neighbours, margin="ratio", retrieval="bwd")) == {(0, 0), (1, 1)}


def test_a_candidate_without_neighbours_is_not_a_hub():
    # IVF found no backward neighbour for y1 (its slots are -1 / -inf): its neighbourhood is unknown, not
    # of mean 0, so (x0, y1) is scored against x0's mean alone and x0 keeps its true partner y0
    fwd_scores, fwd_ids = np.array([[0.9, 0.8], [0.8, 0.3]]), np.array([[0, 1], [1, 0]])
    bwd_scores = np.array([[0.9, 0.3], [-np.inf, -np.inf]])
    bwd_ids = np.array([[0, 1], [-1, -1]])
    forward, _ = best_candidates(NeighbourLists(fwd_scores, fwd_ids, bwd_scores, bwd_ids), "ratio")
    best = {int(s): (int(t), float(v)) for s, t, v in zip(forward.src, forward.tgt, forward.scores)}
    # x0: mean 0.85; y0: mean 0.6 -> (x0, y0) 0.9 / 0.725; (x0, y1) 0.8 / 0.85 (y1 has no mean)
    assert best[0] == (0, pytest.approx(0.9 / 0.725))
    assert best[1] == (1, pytest.approx(0.8 / 0.55))  # x1's mean 0.55 alone


def test_ratio_margin_is_unchanged_on_positive_averages():
    rng = np.random.default_rng(3)
    cosine, average = rng.uniform(-1, 1, (50, 4)), rng.uniform(1e-3, 1, (50, 4))
    np.testing.assert_array_equal(margin_function(cosine, average, "ratio"), cosine / average)  # bit for bit


def test_ratio_margin_with_a_zero_or_negative_neighbourhood_keeps_the_cosine_order():
    # x0's neighbours y0 (0.3) and y1 (-0.3) average 0, as do y0's (x0 0.3, x1 -0.3); y1's average 0.1.
    # (x0, y0): 0.3 / 0 was inf, which the finite filter then dropped with x0; now 0.3 / floor
    fwd_scores, fwd_ids = np.array([[0.3, -0.3], [0.5, -0.3]]), np.array([[0, 1], [1, 0]])
    bwd_scores, bwd_ids = np.array([[0.3, -0.3], [0.5, -0.3]]), np.array([[0, 1], [1, 0]])
    forward, _ = best_candidates(NeighbourLists(fwd_scores, fwd_ids, bwd_scores, bwd_ids), "ratio")
    assert as_set(forward) == {(0, 0), (1, 1)} and np.isfinite(forward.scores).all()
    # a negative average no longer reverses the order: 0.2 beats -0.1
    scores = margin_function(np.array([0.2, -0.1]), np.array([-0.05, -0.05]), "ratio")
    assert scores[0] > scores[1]


def test_a_non_finite_score_does_not_drop_its_row():
    # argmax picks NaN: the row lost its finite candidate 0.5; a row with no finite candidate is dropped
    scores = np.array([[np.nan, 0.5], [np.inf, 0.2], [np.nan, -np.inf]])
    best = _row_best(scores, np.array([[0, 1], [0, 1], [0, 1]]), queries_are_src=True)
    assert list(zip(best.src.tolist(), best.tgt.tolist())) == [(0, 1), (1, 1)]
    assert best.scores.tolist() == pytest.approx([0.5, 0.2])


# --- retrieval modes --------------------------------------------------------------------------

SIMILARITY_3X3 = np.array([[0.9, 0.5, 0.0], [0.2, 0.7, 0.1], [0.0, 0.6, 0.3]])
# absolute margin, k = 3. Forward best: x0->y0 .9, x1->y1 .7, x2->y1 .6.
# Backward best: y0->x0 .9, y1->x1 .7, y2->x2 .3.


@pytest.mark.parametrize(
    ("retrieval", "expected"),
    [
        ("fwd", [(0, 0, 0.9), (1, 1, 0.7), (2, 1, 0.6)]),
        ("bwd", [(0, 0, 0.9), (1, 1, 0.7), (2, 2, 0.3)]),
        ("intersect", [(0, 0, 0.9), (1, 1, 0.7)]),
        # union by score: (0,0) kept, (1,1) kept, (2,1) dropped (y1 used), (2,2) kept
        ("max", [(0, 0, 0.9), (1, 1, 0.7), (2, 2, 0.3)]),
    ],
)
def test_retrieval_modes_hand_computed(retrieval, expected):
    pairs = mine_from_neighbours(neighbours_of(SIMILARITY_3X3, 3), margin="absolute", retrieval=retrieval)
    got = list(zip(pairs.src.tolist(), pairs.tgt.tolist(), pairs.scores.tolist()))
    assert [(s, t) for s, t, _ in got] == [(s, t) for s, t, _ in expected]  # sorted by decreasing score
    assert [v for *_, v in got] == pytest.approx([v for *_, v in expected])


def test_unknown_margin_or_retrieval_is_rejected():
    with pytest.raises(XdistillError, match="unknown margin"):
        mine_from_neighbours(neighbours_of(SIMILARITY_2X2, 2), margin="cosine")
    with pytest.raises(XdistillError, match="unknown retrieval"):
        mine_from_neighbours(neighbours_of(SIMILARITY_2X2, 2), retrieval="both")


def test_vectorised_one_to_one_equals_the_sequential_rule():
    rng = np.random.default_rng(1)
    src = rng.integers(0, 300, 2000)
    tgt = rng.integers(0, 300, 2000)
    scores = rng.random(2000).round(2).astype(np.float32)  # rounding creates ties
    ordered = sort_pairs(src, tgt, scores)
    used_src, used_tgt, sequential = set(), set(), []
    for s, t in zip(ordered.src.tolist(), ordered.tgt.tolist()):
        if s not in used_src and t not in used_tgt:
            used_src.add(s)
            used_tgt.add(t)
            sequential.append((s, t))
    vectorised = greedy_one_to_one(MinedPairs(src, tgt, scores))
    assert list(zip(vectorised.src.tolist(), vectorised.tgt.tolist())) == sequential


def test_one_to_one_on_a_chain_of_conflicts_is_the_sequential_rule():
    # (x0,y0) > (x1,y0) > (x1,y1) > (x2,y1) > ...: each round settles a single pair, so after the
    # vectorised rounds the sequential loop finishes the chain (20,000 rounds took ~10 s)
    n = 20_000
    src = np.arange(2 * n - 1) // 2 + np.arange(2 * n - 1) % 2
    tgt = np.arange(2 * n - 1) // 2
    scores = np.linspace(1.0, 0.0, 2 * n - 1, dtype=np.float32)
    chosen = greedy_one_to_one(MinedPairs(src, tgt, scores))
    assert list(zip(chosen.src.tolist(), chosen.tgt.tolist())) == [(i, i) for i in range(n)]


def test_mine_embeddings_recovers_noisy_translations():
    rng = np.random.default_rng(2)
    src = rng.normal(size=(500, 24)).astype(np.float32)
    src /= np.linalg.norm(src, axis=1, keepdims=True)
    tgt = src + 0.1 * rng.normal(size=src.shape).astype(np.float32)
    tgt /= np.linalg.norm(tgt, axis=1, keepdims=True)
    pairs = mine_embeddings(src, tgt, k=4, margin="ratio", retrieval="max")
    assert len(pairs) == 500 and np.all(pairs.src == pairs.tgt)
    assert np.all(np.diff(pairs.scores) <= 0)


# --- threshold, precision / recall / F1 ------------------------------------------------------


def test_tune_threshold_hand_computed():
    # cut after m kept: tp = 1,1,2,3,3 ; F1 = 2tp/(m+4): .4, .333, .571, .75, .667 -> keep 4
    threshold, f1 = tune_threshold(np.array([0.9, 0.8, 0.7, 0.6, 0.5]), np.array([1, 0, 1, 1, 0]), n_gold=4)
    assert threshold == pytest.approx(0.55)
    assert f1 == pytest.approx(0.75)


def test_tune_threshold_never_splits_equal_scores():
    # cutting between the two 0.7s would give F1 1.0 but is impossible with a threshold
    threshold, f1 = tune_threshold(np.array([0.7, 0.9, 0.7, 0.5]), np.array([0, 1, 1, 0]), n_gold=2)
    assert f1 == pytest.approx(0.8)  # keep 3: tp 2, 2*2/(3+2)
    assert threshold == pytest.approx(0.6)


def test_tune_threshold_degenerate_cases():
    assert tune_threshold(np.array([]), np.array([], bool), n_gold=3) == (float("inf"), 0.0)
    threshold, f1 = tune_threshold(np.array([0.4, 0.2]), np.array([1, 1]), n_gold=2)
    assert f1 == 1.0 and threshold == 0.2  # keep all: the threshold is the last score


def test_tune_threshold_without_a_gold_candidate_predicts_nothing():
    # every cut scores F1 0: argmax took the first, so the test split kept its top group
    assert tune_threshold(np.array([3.0, 2.0, 1.0]), np.array([0, 0, 0]), n_gold=5) == (float("inf"), 0.0)


def test_precision_recall_f1_hand_computed():
    metrics = precision_recall_f1([("a", "1"), ("b", "2"), ("c", "3")], {("a", "1"), ("b", "9")})
    assert metrics == pytest.approx({"precision": 1 / 3, "recall": 0.5, "f1": 0.4})
    assert precision_recall_f1([], {("a", "1")}) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}


def test_threshold_tuned_on_train_is_applied_to_test():
    def split(name: str, gold: set[tuple[str, str]]) -> BuccSplit:
        return BuccSplit("xx", name, ["x0", "x1", "x2"], ["a", "b", "c"], ["e0", "e1", "e2"], ["a", "b", "c"], gold)

    train = split("train", {("x0", "e0"), ("x1", "e1")})
    train_pairs = MinedPairs(np.array([0, 1, 2]), np.array([0, 1, 2]), np.array([0.9, 0.8, 0.3], np.float32))
    # train: keep 2 -> F1 1.0, threshold (0.8 + 0.3) / 2 = 0.55
    test = split("test", {("x0", "e0"), ("x2", "e2")})
    test_pairs = MinedPairs(np.array([0, 1, 2]), np.array([0, 1, 2]), np.array([0.95, 0.6, 0.5], np.float32))
    # test above 0.55: (x0,e0) right, (x1,e1) wrong -> P 0.5, R 0.5, F1 0.5
    metrics = evaluate_split_pairs((train_pairs, train), (test_pairs, test))
    assert metrics["threshold"] == pytest.approx(0.55)
    assert metrics["train_f1"] == pytest.approx(1.0)
    assert (metrics["precision"], metrics["recall"], metrics["f1"]) == pytest.approx((0.5, 0.5, 0.5))
    assert metrics["n_predicted"] == 2
