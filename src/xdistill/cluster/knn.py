"""k-NN search with the corpus side sharded across Dask workers, merged into one top-k per query.

The corpus (a float32 ``.npy`` of L2-normalised rows, at a path or the URL of a network store:
:mod:`xdistill.cluster.staging`) is cut into shards of ``shard_rows``. A task builds each shard's index on
one worker, reading the shard's rows itself, and the index stays there. Each query block is read once by a
task, and Dask hands it to the workers that need it; every shard searches it where the shard lives, and one
task per block merges the shards' lists into the block's k best by similarity (the running top-k of
:func:`xdistill.mining.stream.merge_top_k`, shard by shard in corpus order, so the exact index gives the
single-process lists bit for bit). No task reads a file it did not name: a worker whose shard is lost has it
rebuilt, from the same file, by the worker that takes its task over.

Index kinds of a shard:

- ``flat``: exact inner product; the shard's rows uncompressed (``4 x dim`` bytes a row).
- ``ivfpq``: IVF-PQ (faiss ``IndexIVFPQ``), trained once on blocks of rows spread over the whole corpus and
  copied to every shard before its rows are added: ``pq_m`` bytes a row (48 for 384-d) plus an 8-byte id,
  so a shard of a corpus far larger than one machine fits a worker's memory. Each query block's IVF cells
  are found once (one task) and every shard scans only those cells. PQ similarities are approximate, so each
  shard takes ``rerank x k`` candidates and re-scores them exactly from its own rows before keeping k: the
  margin sees true cosines of the candidates found. The shard's rows stay on the worker's local disk
  (memory-mapped), or are read from the corpus file where it is a local path.

Its recall against exact search is what :func:`recall_at_k` measures.
"""

from __future__ import annotations

import itertools
import logging
import math
import shutil
import tempfile
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from xdistill.cluster.staging import is_url, open_rows
from xdistill.errors import XdistillError
from xdistill.mining.knn import check_finite
from xdistill.mining.stream import DEFAULT_SHARD_ROWS, NpyRows, merge_top_k

if TYPE_CHECKING:
    from distributed import Client

logger = logging.getLogger(__name__)

CLUSTER_INDEX_KINDS = ("flat", "ivfpq")
RERANK_QUERY_ROWS = 4096  # queries re-scored at a time: candidates x dim floats stay ~100 MB
TRAIN_BLOCKS = 64  # runs of rows the IVF-PQ training sample is read in
BLOCKS_IN_FLIGHT_PER_WORKER = 2


@dataclass(frozen=True)
class IndexOptions:
    """How each corpus shard is indexed (``ivfpq`` settings unused by ``flat``)."""

    kind: str = "flat"
    nlist: int | None = None  # IVF cells over the whole corpus; default 4 sqrt(n), at most sample/39
    nprobe: int = 16  # cells visited per query
    pq_m: int | None = None  # PQ bytes per row; default dim / 8
    train_rows: int = 100_000  # rows sampled across the corpus to train the IVF-PQ
    rerank: int = 16  # each shard takes rerank x k candidates and re-scores them exactly from its rows (1: none)

    def __post_init__(self) -> None:
        if self.kind not in CLUSTER_INDEX_KINDS:
            raise XdistillError(f"unknown index kind {self.kind!r}; choose one of {', '.join(CLUSTER_INDEX_KINDS)}")
        if self.nprobe < 1 or self.rerank < 1 or self.train_rows < 1:
            raise XdistillError("index options nprobe, rerank and train_rows must be at least 1")


class ShardIndex:
    """One corpus shard's faiss index, where its rows start in the corpus, and the corpus they came from.

    Pickled through ``faiss.serialize_index`` (Dask moves a shard between workers only when it must,
    e.g. spilling it to disk under memory pressure). An IVF-PQ shard re-scores its candidates from its own
    rows (:meth:`exact_rows`): a memory map of the corpus file where that is a local path, else a copy on
    this worker's local disk (written when first needed, removed with the shard).
    """

    def __init__(self, index: Any, corpus: str, start: int, rows: int) -> None:
        self.index, self.corpus, self.start, self.rows = index, corpus, start, rows
        self._local_copy: Path | None = None

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        import faiss

        return _restore_shard, (faiss.serialize_index(self.index), self.corpus, self.start, self.rows)

    def exact_rows(self, block: np.ndarray | None = None) -> np.ndarray:
        """The shard's rows, uncompressed and memory-mapped (``block``: those rows, when the caller has them)."""
        if not is_url(self.corpus):
            return np.load(self.corpus, mmap_mode="r")[self.start : self.start + self.rows]
        if self._local_copy is None or not self._local_copy.is_file():
            rows = block if block is not None else open_rows(self.corpus).read(self.start, self.start + self.rows)
            folder = Path(tempfile.mkdtemp(prefix="xdistill-shard-", dir=_local_directory()))
            np.save(folder / "rows.npy", rows)
            self._local_copy = folder / "rows.npy"
        return np.load(self._local_copy, mmap_mode="r")

    def __del__(self) -> None:
        copy = getattr(self, "_local_copy", None)
        if copy is not None:
            shutil.rmtree(copy.parent, ignore_errors=True)


def _restore_shard(data: np.ndarray, corpus: str, start: int, rows: int) -> ShardIndex:
    import faiss

    return ShardIndex(faiss.deserialize_index(data), corpus, start, rows)


def _local_directory() -> str | None:
    """This Dask worker's scratch folder (None outside a worker: the system's temporary folder)."""
    try:
        from distributed import get_worker

        return str(get_worker().local_directory)
    except (ImportError, ValueError):
        return None


# --------------------------------------------------------------------------------------------
# Tasks (run on the workers)
# --------------------------------------------------------------------------------------------


def read_block(location: str, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` of the matrix at ``location``, checked finite."""
    return check_finite(open_rows(location).read(start, stop), f"{location} (rows {start}-{stop - 1})")


def training_sample(rows: NpyRows, wanted: int, blocks: int = TRAIN_BLOCKS) -> np.ndarray:
    """About ``wanted`` rows spread over the whole matrix, read as ``blocks`` evenly spaced runs of rows
    (a few range requests on a network store, where single rows would be one request each)."""
    n = len(rows)
    if n <= wanted:
        return rows.read(0, n)
    run = max(1, -(-wanted // blocks))
    starts = np.linspace(0, n - run, num=min(blocks, -(-wanted // run)), dtype=np.int64)
    return np.concatenate([rows.read(int(first), int(first) + run) for first in starts])


def train_ivfpq(corpus: str, options: IndexOptions) -> np.ndarray:
    """An empty IVF-PQ index trained on rows spread over the corpus, serialised (every shard copies it)."""
    import faiss

    rows = open_rows(corpus)
    sample = check_finite(np.ascontiguousarray(training_sample(rows, options.train_rows)), f"{corpus} (sample)")
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


def build_shard(corpus: str, start: int, stop: int, kind: str, trained: np.ndarray | None, nprobe: int) -> ShardIndex:
    """The index of corpus rows ``start:stop``: exact, or the trained IVF-PQ filled with them."""
    import faiss

    block = read_block(corpus, start, stop)
    index: Any = faiss.IndexFlatIP(block.shape[1])
    if kind == "ivfpq" and trained is not None:
        index = faiss.deserialize_index(trained)
        index.nprobe = min(nprobe, index.nlist)
    index.add(block)
    shard = ShardIndex(index, corpus, start, len(block))
    if kind == "ivfpq" and is_url(corpus):
        shard.exact_rows(block)  # the uncompressed rows to local disk now, while they are in memory
    return shard


def assign_block(trained: np.ndarray, block: np.ndarray, nprobe: int) -> tuple[Any, Any]:
    """The IVF cells each query row of the block visits: computed once per block, not once per shard."""
    import faiss

    index: Any = faiss.deserialize_index(trained)
    quantizer = index.quantizer
    return quantizer.search(block, min(nprobe, quantizer.ntotal))


def search_shard(
    shard: ShardIndex, block: np.ndarray, width: int, rerank: int, cells: tuple[Any, Any] | None
) -> tuple[Any, Any]:
    """``(scores, corpus ids)`` of the block's ``width`` best rows in one shard, best first (ids -1: none found).

    With ``cells`` (IVF-PQ) the shard takes ``rerank x width`` candidates by their approximate scores and,
    when ``rerank`` > 1, keeps the ``width`` best by their exact cosines."""
    wanted = min(width * (rerank if cells is not None else 1), shard.rows)
    if cells is None:
        scores, ids = shard.index.search(block, wanted)
    else:
        cell_scores, cell_ids = cells
        scores, ids = shard.index.search_preassigned(block, wanted, cell_ids, cell_scores)
        if rerank > 1:
            scores = exact_scores(block, ids, shard.exact_rows())
            order = np.argsort(-scores, axis=1, kind="stable")
            scores, ids = np.take_along_axis(scores, order, 1), np.take_along_axis(ids, order, 1)
    scores, ids = scores[:, :width], ids[:, :width]
    scores = np.where(ids >= 0, scores, -np.inf).astype(np.float32)
    return scores, np.where(ids >= 0, ids + shard.start, -1)


def merge_block(width: int, *results: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The ``width`` best of every shard's list for one query block, merged in corpus order."""
    rows = results[0][0].shape[0]
    best_scores = np.full((rows, width), -np.inf, np.float32)
    best_ids = np.full((rows, width), -1, np.int64)
    for scores, ids in results:
        best_scores, best_ids = merge_top_k(best_scores, best_ids, scores, ids, width)
    return best_scores, best_ids


def exact_scores(queries: np.ndarray, ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Exact cosines of the candidates ``ids`` (row numbers of ``rows``, -1: none; those score -inf)."""
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

    ``queries`` and ``corpus`` are paths every worker reaches or URLs of a network store
    (:mod:`xdistill.cluster.staging`). Returns ``(scores, ids)`` of shape ``(n_queries, min(k, n_corpus))``,
    best first, as :func:`xdistill.mining.stream.sharded_knn` does (-inf / -1 where IVF-PQ found fewer).
    """
    search = BlockSearch(client, queries, corpus, k, options=options, shard_rows=shard_rows, query_rows=query_rows)
    best_scores = np.full((search.n_queries, search.width), -np.inf, np.float32)
    best_ids = np.full((search.n_queries, search.width), -1, np.int64)
    for (start, stop), merged in search.blocks():
        best_scores[start:stop], best_ids[start:stop] = merged.result()
        merged.release()
    return best_scores, best_ids


class BlockSearch:
    """One direction's sharded k-NN search, query block by query block (the module docstring).

    :meth:`blocks` yields each block's span and the future of its merged ``(scores, ids)`` lists, in order,
    once that future is done; at most ``BLOCKS_IN_FLIGHT_PER_WORKER`` blocks per worker are in flight.
    The caller gathers each block (:func:`distributed_knn`) or leaves it on the cluster for more tasks
    (:func:`xdistill.cluster.mine.mine_on_cluster`) and releases it when done.
    """

    def __init__(
        self,
        client: Client,
        queries: str | Path,
        corpus: str | Path,
        k: int,
        *,
        options: IndexOptions | None = None,
        shard_rows: int = DEFAULT_SHARD_ROWS,
        query_rows: int | None = None,
    ) -> None:
        self.client, self.options, self.shard_rows = client, options or IndexOptions(), shard_rows
        self.queries, self.corpus = _location(queries), _location(corpus)
        query_file, corpus_file = open_rows(self.queries), open_rows(self.corpus)
        if query_file.shape[1] != corpus_file.shape[1]:
            raise XdistillError(
                f"dimension mismatch: {self.queries} {query_file.shape[1]} vs {self.corpus} {corpus_file.shape[1]}"
            )
        self.n_queries, self.n_corpus = len(query_file), len(corpus_file)
        self.width = min(k, self.n_corpus)
        rows = query_rows or shard_rows
        self.spans = [(start, min(start + rows, self.n_queries)) for start in range(0, self.n_queries, rows)]

    def blocks(self) -> Iterator[tuple[tuple[int, int], Any]]:
        """``(span, merged)`` of every query block, in order (none when either side is empty)."""
        from distributed import wait

        if self.width == 0 or self.n_queries == 0:
            return
        client, options = self.client, self.options
        window = BLOCKS_IN_FLIGHT_PER_WORKER * max(1, len(client.scheduler_info()["workers"]))
        trained = client.submit(train_ivfpq, self.corpus, options) if options.kind == "ivfpq" else None
        shards = place_shards(client, self.corpus, self.n_corpus, self.shard_rows, options, trained)

        def submit(span: tuple[int, int]) -> tuple[tuple[int, int], Any]:
            block = client.submit(read_block, self.queries, *span)
            cells = client.submit(assign_block, trained, block, options.nprobe) if trained is not None else None
            parts = [client.submit(search_shard, shard, block, self.width, options.rerank, cells) for shard in shards]
            return span, client.submit(merge_block, self.width, *parts)

        try:
            pending = iter(self.spans)
            in_flight = deque(submit(span) for span in itertools.islice(pending, window))
            while in_flight:
                span, merged = in_flight.popleft()
                wait(merged)
                if merged.status == "error":
                    merged.result()  # raises the task's error here
                if (following := next(pending, None)) is not None:
                    in_flight.append(submit(following))
                yield span, merged
        finally:
            for future in [*shards, *([trained] if trained is not None else [])]:
                future.release()


def _location(location: str | Path) -> str:
    """A URL as it is, a path resolved (the workers may run in other folders)."""
    return str(location) if is_url(location) else str(Path(location).resolve())


def place_shards(
    client: Client, corpus: str, rows: int, shard_rows: int, options: IndexOptions, trained: Any
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
