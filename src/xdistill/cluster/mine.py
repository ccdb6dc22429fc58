"""Bitext mining on a Dask cluster: encoding, sharded k-NN both ways and margin scoring on the workers.

1. Each side's lines with text are encoded in blocks on the workers (one model per worker process,
   loaded once) and written in order into ``<work_dir>/src.npy`` and ``tgt.npy``.
2. k-NN source->target with the target sharded across workers, and target->source with the source
   sharded (:class:`xdistill.cluster.knn.BlockSearch`). Each query block's merged lists stay on the
   cluster; the client gathers only each row's neighbour mean (one number a sentence).
3. The margin needs both directions' neighbour means: once both are known, they are sent to every worker
   and each block's rows are margin-scored where the block's lists are, by the single-process miner's own
   function (:func:`xdistill.mining.margin.best_of_rows`). The client receives each row's best candidate
   and retrieves the pairs (:func:`xdistill.mining.margin.retrieve`), so the exact index gives the same
   pairs as ``xdistill mine``, while the client holds a few numbers a sentence rather than both
   directions' k-NN lists.

The workers read the embedding files themselves: on several hosts, from a folder every worker mounts under
the same path, or from a network store the client uploaded them to (``xdistill cluster-mine --work-dir URL``;
:mod:`xdistill.cluster.staging`).
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from xdistill.cluster.knn import BlockSearch, IndexOptions
from xdistill.mining.margin import (
    MARGINS,
    RETRIEVALS,
    MinedPairs,
    best_of_rows,
    check_choice,
    concatenate_pairs,
    neighbour_means,
    retrieve,
)
from xdistill.mining.stream import DEFAULT_SHARD_ROWS, LineFile, write_npy_shards

if TYPE_CHECKING:
    from distributed import Client

    from xdistill.models.encoders import Encoder

ENCODE_BLOCK_ROWS = 10_000  # sentences a task encodes
BLOCKS_IN_FLIGHT_PER_WORKER = 2


@functools.lru_cache(maxsize=2)
def worker_encoder(model: str, device: str | None, backend: str) -> Encoder:
    """This worker process's encoder, loaded on its first block."""
    from xdistill.models import load_encoder

    return load_encoder(model, device=device, backend=backend)


def encode_block(texts: list[str], model: str, device: str | None, backend: str, batch_size: int) -> np.ndarray:
    return worker_encoder(model, device, backend).encode(texts, batch_size=batch_size, show_progress_bar=False)


def encode_on_cluster(
    client: Client,
    lines: LineFile,
    rows: np.ndarray,
    out_path: Path,
    *,
    model: str,
    device: str | None,
    backend: str,
    batch_size: int,
    block_rows: int = ENCODE_BLOCK_ROWS,
) -> Path:
    """Embed ``lines``' rows ``rows`` (sorted line numbers) into ``out_path`` (.npy), blocks in order."""
    window = BLOCKS_IN_FLIGHT_PER_WORKER * max(1, len(client.scheduler_info()["workers"]))

    def texts_of_blocks() -> Iterator[list[str]]:
        for start in range(0, len(rows), block_rows):
            yield lines.lines(rows[start : start + block_rows])

    def vectors_in_order() -> Iterator[np.ndarray]:
        in_flight: deque[Any] = deque()
        for texts in texts_of_blocks():
            in_flight.append(client.submit(encode_block, texts, model, device, backend, batch_size))
            if len(in_flight) >= window:
                yield _take(in_flight.popleft())
        while in_flight:
            yield _take(in_flight.popleft())

    return write_npy_shards(vectors_in_order(), len(rows), out_path)


def _take(future: Any) -> np.ndarray:
    result = future.result()
    future.release()
    return result


def mine_on_cluster(
    client: Client,
    src: str | Path,
    tgt: str | Path,
    *,
    k: int = 4,
    margin: str = "ratio",
    retrieval: str = "max",
    shard_rows: int = DEFAULT_SHARD_ROWS,
    options: IndexOptions | None = None,
) -> MinedPairs:
    """Mine pairs between two embedding ``.npy`` files (paths or URLs), each side's search sharded across the
    cluster and each block's margin scored where its lists are (the module docstring)."""
    check_choice(margin, MARGINS, "margin")
    check_choice(retrieval, RETRIEVALS, "retrieval")
    with ThreadPoolExecutor(max_workers=2) as directions:  # both at once: one's training overlaps the other's work
        searches = [
            directions.submit(search_kept, client, queries, corpus, k, options, shard_rows)
            for queries, corpus in ((src, tgt), (tgt, src))
        ]
        fwd, bwd = (search.result() for search in searches)
    try:
        src_means, tgt_means = client.scatter([fwd.means, bwd.means], broadcast=True)
        forward = best_on_cluster(client, fwd, src_means, tgt_means, margin, queries_are_src=True)
        backward = best_on_cluster(client, bwd, tgt_means, src_means, margin, queries_are_src=False)
    finally:
        for _, merged in [*fwd.blocks, *bwd.blocks]:
            merged.release()
    return retrieve(forward, backward, retrieval)


@dataclass
class KeptLists:
    """One direction's k-NN lists, left on the cluster block by block, and each query row's neighbour mean."""

    blocks: list[tuple[int, Any]]  # (first query row, future of the block's (scores, ids))
    means: np.ndarray


def search_kept(
    client: Client, queries: str | Path, corpus: str | Path, k: int, options: IndexOptions | None, shard_rows: int
) -> KeptLists:
    """Search every query block and keep its lists on the cluster; gather only the rows' neighbour means."""
    search = BlockSearch(client, queries, corpus, k, options=options, shard_rows=shard_rows)
    blocks, means = [], []
    for (start, _), merged in search.blocks():
        blocks.append((start, merged))
        means.append(client.submit(block_means, merged))
    gathered = client.gather(means)
    return KeptLists(blocks, np.concatenate(gathered) if gathered else np.zeros(0))


def block_means(merged: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    return neighbour_means(merged[0])


def best_on_cluster(
    client: Client, kept: KeptLists, query_means: Any, candidate_means: Any, margin: str, *, queries_are_src: bool
) -> MinedPairs:
    """Every query row's best-scoring candidate, each block scored on a worker that holds its lists."""
    parts = [
        client.submit(block_best, merged, query_means, candidate_means, start, margin, queries_are_src)
        for start, merged in kept.blocks
    ]
    return concatenate_pairs(client.gather(parts))


def block_best(
    merged: tuple[np.ndarray, np.ndarray],
    query_means: np.ndarray,
    candidate_means: np.ndarray,
    first_row: int,
    margin: str,
    queries_are_src: bool,
) -> MinedPairs:
    scores, ids = merged
    rows = query_means[first_row : first_row + len(scores)]
    return best_of_rows(scores, ids, rows, candidate_means, margin, queries_are_src, first_row)
