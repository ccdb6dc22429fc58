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
  8-byte id, so a shard of a corpus far larger than one machine fits a worker. Each query block's
  IVF cells are found once (one task) and every shard scans only those cells. PQ similarities are
  approximate, so each shard returns ``rerank x k`` candidates and the block's merge re-scores the
  merged candidates exactly from the corpus file (memory-mapped) before keeping k: the margin sees
  true cosines of the candidates found.

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
    rerank: int = 16  # candidates = rerank x k per shard and after the merge, re-scored exactly (1: none)

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


def assign_block(trained: np.ndarray, queries: Path, start: int, stop: int, nprobe: int) -> tuple[Any, Any]:
    """The IVF cells each query row of ``start:stop`` visits: computed once per block, not once per shard."""
    import faiss

    index: Any = faiss.deserialize_index(trained)
    quantizer = index.quantizer
    block = check_finite(NpyRows(queries).read(start, stop), f"{queries} (rows {start}-{stop - 1})")
    return quantizer.search(block, min(nprobe, quantizer.ntotal))


def search_shard(
    shard: ShardIndex, queries: Path, start: int, stop: int, wanted: int, cells: tuple[Any, Any] | None
) -> tuple[Any, Any]:
    """``(scores, corpus ids)`` of query rows ``start:stop`` in one shard, best first (ids -1: none found)."""
    block = check_finite(NpyRows(queries).read(start, stop), f"{queries} (rows {start}-{stop - 1})")
    wanted = min(wanted, shard.rows)
    if cells is None:
        scores, ids = shard.index.search(block, wanted)
    else:
        cell_scores, cell_ids = cells
        scores, ids = shard.index.search_preassigned(block, wanted, cell_ids, cell_scores)
    scores = np.where(ids >= 0, scores, -np.inf).astype(np.float32)
    return scores, np.where(ids >= 0, ids + shard.start, -1)


def merge_block(
    width: int, rescore: tuple[Path, Path, int, int] | None, *results: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """The ``width`` best of every shard's list for one query block, merged in corpus order.

    ``rescore`` = ``(queries, corpus, start, stop)``: the shards' lists are approximate (PQ); the
    merged candidates are re-scored exactly from the corpus file before the best ``width`` are kept.
    """
    rows = results[0][0].shape[0]
    keep = max(width, *(scores.shape[1] for scores, _ in results)) if rescore else width  # rerank x k when re-scored
    best_scores = np.full((rows, keep), -np.inf, np.float32)
    best_ids = np.full((rows, keep), -1, np.int64)
    for scores, ids in results:
        best_scores, best_ids = merge_top_k(best_scores, best_ids, scores, ids, keep)
    if rescore is not None:
        queries, corpus, start, stop = rescore
        best_scores = exact_scores(NpyRows(queries).read(start, stop), best_ids, corpus)
        order = np.argsort(-best_scores, axis=1, kind="stable")
        best_scores, best_ids = np.take_along_axis(best_scores, order, 1), np.take_along_axis(best_ids, order, 1)
    return best_scores[:, :width], best_ids[:, :width]


def exact_scores(queries: np.ndarray, ids: np.ndarray, corpus: Path) -> np.ndarray:
    """Exact cosines of the candidates, read from the corpus file (memory-mapped; missing ones -inf)."""
    rows = np.load(corpus, mmap_mode="r")
    scores = np.full(ids.shape, -np.inf, np.float32)
    for first in range(0, len(queries), RERANK_QUERY_ROWS):
        part = slice(first, first + RERANK_QUERY_ROWS)
        found = ids[part] >= 0
        vectors = np.asarray(rows[np.where(found, ids[part], 0)], dtype=np.float32)
        scores[part] = np.where(found, np.einsum("qd,qkd->qk", queries[part], vectors), -np.inf)
    return scores


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
    blocks = [(start, min(start + query_rows, len(query_file))) for start in range(0, len(query_file), query_rows)]
    window = BLOCKS_IN_FLIGHT_PER_WORKER * max(1, len(client.scheduler_info()["workers"]))
    trained = client.submit(train_ivfpq, corpus, options) if options.kind == "ivfpq" else None
    shards = place_shards(client, corpus, len(corpus_file), shard_rows, options, trained)
    rerank = options.rerank if trained is not None and options.rerank > 1 else 1
    in_flight: deque[tuple[tuple[int, int], Any]] = deque()

    def submit(block: tuple[int, int]) -> None:
        start, stop = block
        cells = (
            client.submit(assign_block, trained, queries, start, stop, options.nprobe) if trained is not None else None
        )
        parts = [client.submit(search_shard, shard, queries, start, stop, width * rerank, cells) for shard in shards]
        rescore = (queries, corpus, start, stop) if rerank > 1 else None
        in_flight.append((block, client.submit(merge_block, width, rescore, *parts)))

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
    for future in [*shards, *([trained] if trained is not None else [])]:
        future.release()
    return best_scores, best_ids


def place_shards(
    client: Client, corpus: Path, rows: int, shard_rows: int, options: IndexOptions, trained: Any
) -> list[Any]:
    """Futures of the corpus shards' indexes, spread round-robin over the workers (any worker if one dies)."""
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
