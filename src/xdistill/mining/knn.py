"""Inner-product k-nearest-neighbour search (faiss) and translation retrieval accuracy.

Embeddings are expected L2-normalised, so inner product equals cosine similarity.
The default index is exact (``IndexFlatIP``); ``index="ivf"`` builds an inverted-file
index (``IndexIVFFlat``, inner-product metric) for corpora too large for exact search.
"""

from __future__ import annotations

import math

import faiss
import numpy as np

from xdistill.errors import XdistillError
from xdistill.vectors import as_float32_matrix, l2_normalise

INDEX_KINDS = ("flat", "ivf")


def build_index(
    corpus: np.ndarray,
    *,
    index: str = "flat",
    nlist: int | None = None,
    nprobe: int = 16,
    seed: int = 0,
    add: bool = True,
) -> faiss.Index:
    """Build a faiss inner-product index over ``corpus`` rows.

    ``ivf``: ``nlist`` clusters (default ~4*sqrt(n), at most n/39 so training has enough points
    per centroid); ``nprobe`` clusters are visited per query (recall/speed trade-off).
    ``add=False`` returns the (trained) index empty, for callers that add rows in shards.
    """
    corpus = as_float32_matrix(corpus, "corpus")
    dim = corpus.shape[1]
    built: faiss.Index
    if index == "flat":
        built = faiss.IndexFlatIP(dim)
    elif index == "ivf":
        n = corpus.shape[0]
        if nlist is None:
            nlist = max(1, min(int(4 * math.sqrt(n)), n // 39))
        quantizer = faiss.IndexFlatIP(dim)
        ivf = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
        ivf.cp.seed = seed  # k-means initialisation: deterministic for a given corpus
        ivf.train(corpus)
        ivf.nprobe = min(nprobe, nlist)
        built = ivf
    else:
        raise XdistillError(f"unknown index kind {index!r}; choose one of {', '.join(INDEX_KINDS)}")
    if add:
        built.add(corpus)
    return built


def check_finite(matrix: np.ndarray, name: str) -> np.ndarray:
    """``matrix`` unchanged when every value is finite; an error naming how many rows are not.

    faiss gives a NaN query no neighbour (id -1) and a NaN corpus row no match, so retrieval would
    count a miss and mining drop the row: a broken model would get a score instead of an error.
    """
    if np.isfinite(matrix).all():  # the common case: one pass, no per-row work
        return matrix
    bad = int(np.sum(~np.isfinite(matrix).all(axis=1)))
    raise XdistillError(f"{name}: {bad} of {matrix.shape[0]} embedding rows are not finite (NaN or inf)")


def knn_search(
    queries: np.ndarray,
    corpus: np.ndarray,
    k: int,
    *,
    index: str = "flat",
    nlist: int | None = None,
    nprobe: int = 16,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` corpus rows with the highest inner product for each query row.

    Returns ``(scores, indices)``, both of shape ``(len(queries), k')`` with
    ``k' = min(k, len(corpus))``, sorted by decreasing score. With an IVF index a query may
    find fewer than ``k'`` neighbours; those slots hold index -1 and score -inf. Non-finite
    (NaN or inf) embedding rows on either side are an error (:func:`check_finite`).
    """
    if k < 1:
        raise XdistillError(f"k must be at least 1, got {k}")
    queries = check_finite(as_float32_matrix(queries, "queries"), "queries")
    corpus = check_finite(as_float32_matrix(corpus, "corpus"), "corpus")
    if queries.shape[1] != corpus.shape[1]:
        raise XdistillError(f"dimension mismatch: queries {queries.shape[1]} vs corpus {corpus.shape[1]}")
    k = min(k, corpus.shape[0])
    if k == 0 or queries.shape[0] == 0:
        return np.zeros((queries.shape[0], k), np.float32), np.zeros((queries.shape[0], k), np.int64)
    searcher = build_index(corpus, index=index, nlist=nlist, nprobe=nprobe)
    scores, indices = searcher.search(queries, k)
    scores[indices < 0] = -np.inf
    return scores, indices


def retrieval_hits(src_emb: np.ndarray, tgt_emb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per query, whether its nearest neighbour is its own translation: ``(src->tgt, tgt->src)`` booleans.

    Row ``i`` of ``src_emb`` is the translation of row ``i`` of ``tgt_emb``. Rows are
    L2-normalised here, so the score is cosine similarity (ties resolve to faiss' order).
    """
    src = l2_normalise(as_float32_matrix(src_emb, "src_emb"))
    tgt = l2_normalise(as_float32_matrix(tgt_emb, "tgt_emb"))
    if src.shape != tgt.shape:
        raise XdistillError(f"src and tgt embeddings must have the same shape, got {src.shape} vs {tgt.shape}")
    n = src.shape[0]
    if n == 0:
        raise XdistillError("retrieval accuracy needs at least one pair")
    gold = np.arange(n)
    _, src_to_tgt = knn_search(src, tgt, 1)
    _, tgt_to_src = knn_search(tgt, src, 1)
    return src_to_tgt[:, 0] == gold, tgt_to_src[:, 0] == gold


def retrieval_accuracy(src_emb: np.ndarray, tgt_emb: np.ndarray) -> tuple[float, float]:
    """Nearest-neighbour translation accuracy ``(src->tgt, tgt->src)``: the means of :func:`retrieval_hits`."""
    src_hits, tgt_hits = retrieval_hits(src_emb, tgt_emb)
    return float(np.mean(src_hits)), float(np.mean(tgt_hits))
