"""k-NN search with the corpus side sharded across Dask workers, merged into one top-k per query.

The corpus (a float32 ``.npy`` of L2-normalised rows, read by path: each worker reads its rows) is
cut into shards of ``shard_rows``. A task builds each shard's index on one worker, where it stays;
every query block is searched against every shard by a task that runs where that shard lives, and
one task per block merges the shards' lists into the block's k best by similarity (the running
top-k of :func:`xdistill.mining.stream.merge_top_k`, shard by shard in corpus order, so the exact
index gives the single-process lists bit for bit).

Index kinds of a shard:

- ``flat``: exact inner product; the shard's rows uncompressed (``4 x dim`` bytes a row).
- ``ivfpq``: IVF-PQ (faiss ``IndexIVFPQ``), trained once on rows spread over the whole corpus and
  copied to every shard before its rows are added: ``pq_m`` bytes a row (48 for 384-d) plus an
  8-byte id, so a shard of a corpus far larger than one machine fits a worker. PQ similarities are
  approximate, so each shard returns ``rerank x k`` candidates and re-scores them exactly from its
  rows on disk (memory-mapped): the margin then sees true cosines of the candidates found.

Its recall against exact search is what :func:`recall_at_k` measures.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from xdistill.errors import XdistillError
from xdistill.mining.knn import check_finite
from xdistill.mining.stream import DEFAULT_SHARD_ROWS, NpyRows, merge_top_k

if TYPE_CHECKING:
    from distributed import Client

logger = logging.getLogger(__name__)

CLUSTER_INDEX_KINDS = ("flat", "ivfpq")
RERANK_QUERY_ROWS = 4096  # queries re-scored at a time: candidates x dim floats stay ~100 MB
BLOCKS_IN_FLIGHT_PER_WORKER = 2


@dataclass(frozen=True)
class IndexOptions:
    """How each corpus shard is indexed (``ivfpq`` settings unused by ``flat``)."""

    kind: str = "flat"
    nlist: int | None = None  # IVF cells over the whole corpus; default 4 sqrt(n), at most sample/39
    nprobe: int = 16  # cells visited per query
    pq_m: int | None = None  # PQ bytes per row; default dim / 8
    train_rows: int = 100_000  # rows sampled across the corpus to train the IVF-PQ
    rerank: int = 4  # candidates per shard = rerank x k, re-scored exactly (1: no re-scoring)

    def __post_init__(self) -> None:
        if self.kind not in CLUSTER_INDEX_KINDS:
            raise XdistillError(f"unknown index kind {self.kind!r}; choose one of {', '.join(CLUSTER_INDEX_KINDS)}")
        if self.nprobe < 1 or self.rerank < 1 or self.train_rows < 1:
            raise XdistillError("index options nprobe, rerank and train_rows must be at least 1")


class ShardIndex:
    """One corpus shard's faiss index, where its rows start in the corpus, and the file they came from.

    Pickled through ``faiss.serialize_index`` (Dask moves a shard between workers only when it must,
    e.g. spilling it to disk under memory pressure).
    """

    def __init__(self, index: Any, path: Path, start: int, rows: int) -> None:
        self.index, self.path, self.start, self.rows = index, path, start, rows

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        import faiss

        return _restore_shard, (faiss.serialize_index(self.index), self.path, self.start, self.rows)


def _restore_shard(data: np.ndarray, path: Path, start: int, rows: int) -> ShardIndex:
    import faiss

    return ShardIndex(faiss.deserialize_index(data), path, start, rows)


# --------------------------------------------------------------------------------------------
# Tasks (run on the workers)
# --------------------------------------------------------------------------------------------


def train_ivfpq(corpus: Path, options: IndexOptions) -> np.ndarray:
    """An empty IVF-PQ index trained on evenly spaced corpus rows, serialised (every shard copies it)."""
    import faiss

    rows = np.load(corpus, mmap_mode="r")
    step = max(1, -(-len(rows) // options.train_rows))
    sample = check_finite(np.ascontiguousarray(rows[::step], dtype=np.float32), f"{corpus} (training sample)")
    n, dim = sample.shape
    nlist = options.nlist or max(1, min(int(4 * math.sqrt(len(rows))), n // 39))
    pq_m = options.pq_m or (dim // 8 if dim % 8 == 0 else dim)
    if dim % pq_m:
        raise XdistillError(f"pq_m {pq_m} must divide the embedding dimension {dim}")
    nbits = max(1, min(8, int(math.log2(n))))  # a PQ codebook of 2^nbits needs that many training rows
    index = faiss.IndexIVFPQ(faiss.IndexFlatIP(dim), dim, nlist, pq_m, nbits, faiss.METRIC_INNER_PRODUCT)
    index.cp.seed = 0
    index.train(sample)
    return faiss.serialize_index(index)


def build_shard(corpus: Path, start: int, stop: int, kind: str, trained: np.ndarray | None, nprobe: int) -> ShardIndex:
    """The index of corpus rows ``start:stop``: exact, or the trained IVF-PQ filled with them."""
    import faiss

    block = check_finite(NpyRows(corpus).read(start, stop), f"{corpus} (rows {start}-{stop - 1})")
    index: Any = faiss.IndexFlatIP(block.shape[1])
    if kind == "ivfpq" and trained is not None:
        index = faiss.deserialize_index(trained)
        index.nprobe = min(nprobe, index.nlist)
    index.add(block)
    return ShardIndex(index, corpus, start, len(block))


def search_shard(shard: ShardIndex, queries: Path, start: int, stop: int, k: int, rerank: int) -> tuple[Any, Any]:
    """``(scores, corpus ids)`` of query rows ``start:stop`` in one shard, best first (ids -1: none found)."""
    block = check_finite(NpyRows(queries).read(start, stop), f"{queries} (rows {start}-{stop - 1})")
    wanted = min(k * rerank, shard.rows)
    scores, ids = shard.index.search(block, wanted)
    if rerank > 1 and wanted > k:
        scores, ids = _rescore(block, ids, shard)
        order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        scores, ids = np.take_along_axis(scores, order, axis=1), np.take_along_axis(ids, order, axis=1)
    scores = np.where(ids >= 0, scores, -np.inf).astype(np.float32)
    return scores, np.where(ids >= 0, ids + shard.start, -1)


def _rescore(queries: np.ndarray, ids: np.ndarray, shard: ShardIndex) -> tuple[np.ndarray, np.ndarray]:
    """Exact cosines of the candidates, from the shard's rows on disk (missing candidates -inf)."""
    rows = np.load(shard.path, mmap_mode="r")
    scores = np.full(ids.shape, -np.inf, np.float32)
    for first in range(0, len(queries), RERANK_QUERY_ROWS):
        part = slice(first, first + RERANK_QUERY_ROWS)
        local = ids[part]
        found = local >= 0
        vectors = np.asarray(rows[shard.start + np.where(found, local, 0)], dtype=np.float32)
        exact = np.einsum("qd,qkd->qk", queries[part], vectors)
        scores[part] = np.where(found, exact, -np.inf)
    return scores, ids


def merge_shards(width: int, *results: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The ``width`` best of every shard's list for one query block, merged in corpus order."""
    rows = results[0][0].shape[0]
    best_scores = np.full((rows, width), -np.inf, np.float32)
    best_ids = np.full((rows, width), -1, np.int64)
    for scores, ids in results:
        best_scores, best_ids = merge_top_k(best_scores, best_ids, scores, ids, width)
    return best_scores, best_ids


# --------------------------------------------------------------------------------------------
# The search (client)
# --------------------------------------------------------------------------------------------


def distributed_knn(
    client: Client,
    queries: str | Path,
    corpus: str | Path,
    k: int,
    *,
    options: IndexOptions | None = None,
    shard_rows: int = DEFAULT_SHARD_ROWS,
    query_rows: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """k-NN of every query row among the corpus rows, the corpus sharded across the cluster's workers.

    Returns ``(scores, ids)`` of shape ``(n_queries, min(k, n_corpus))``, best first, as
    :func:`xdistill.mining.stream.sharded_knn` does (-inf / -1 where IVF-PQ found fewer).
    """
    options = options or IndexOptions()
    queries, corpus = Path(queries).resolve(), Path(corpus).resolve()
    query_file, corpus_file = NpyRows(queries), NpyRows(corpus)
    if query_file.shape[1] != corpus_file.shape[1]:
        raise XdistillError(f"dimension mismatch: {queries} {query_file.shape[1]} vs {corpus} {corpus_file.shape[1]}")
    query_rows = query_rows or shard_rows
    width = min(k, len(corpus_file))
    best_scores = np.full((len(query_file), width), -np.inf, np.float32)
    best_ids = np.full((len(query_file), width), -1, np.int64)
    if width == 0 or len(query_file) == 0:
        return best_scores, best_ids
    shards = place_shards(client, corpus, len(corpus_file), shard_rows, options)
    blocks = [(start, min(start + query_rows, len(query_file))) for start in range(0, len(query_file), query_rows)]
    window = BLOCKS_IN_FLIGHT_PER_WORKER * max(1, len(client.scheduler_info()["workers"]))
    rerank = options.rerank if options.kind == "ivfpq" else 1
    in_flight: deque[tuple[tuple[int, int], Any]] = deque()

    def submit(block: tuple[int, int]) -> None:
        start, stop = block
        parts = [client.submit(search_shard, shard, queries, start, stop, width, rerank) for shard in shards]
        in_flight.append((block, client.submit(merge_shards, width, *parts)))

    pending = iter(blocks)
    for block in pending:
        submit(block)
        if len(in_flight) >= window:
            break
    while in_flight:
        (start, stop), merged = in_flight.popleft()
        best_scores[start:stop], best_ids[start:stop] = merged.result()
        merged.release()
        if (following := next(pending, None)) is not None:
            submit(following)
    for shard in shards:
        shard.release()
    return best_scores, best_ids


def place_shards(client: Client, corpus: Path, rows: int, shard_rows: int, options: IndexOptions) -> list[Any]:
    """Futures of the corpus shards' indexes, spread round-robin over the workers (any worker if one dies)."""
    trained = client.submit(train_ivfpq, corpus, options) if options.kind == "ivfpq" else None
    workers = sorted(client.scheduler_info()["workers"])
    return [
        client.submit(
            build_shard,
            corpus,
            start,
            min(start + shard_rows, rows),
            options.kind,
            trained,
            options.nprobe,
            workers=[workers[number % len(workers)]] if workers else None,
            allow_other_workers=True,
        )
        for number, start in enumerate(range(0, rows, shard_rows))
    ]


def recall_at_k(approximate_ids: np.ndarray, exact_ids: np.ndarray) -> float:
    """Share of the exact k nearest neighbours that the approximate search found (per query, averaged)."""
    found = [len(set(a[a >= 0].tolist()) & set(e[e >= 0].tolist())) for a, e in zip(approximate_ids, exact_ids)]
    return float(np.sum(found) / max(1, int((exact_ids >= 0).sum())))
