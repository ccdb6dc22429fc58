"""Bitext mining on a Dask cluster: encoding on the workers, sharded k-NN both ways, margin on the client.

1. Each side's lines with text are encoded in blocks on the workers (one model per worker process,
   loaded once) and written in order into ``<work_dir>/src.npy`` and ``tgt.npy``.
2. k-NN source->target with the target sharded across workers, and target->source with the source
   sharded (:func:`xdistill.cluster.knn.distributed_knn`): the margin needs both directions'
   neighbour means.
3. The merged lists are margin-scored and retrieved by :func:`xdistill.mining.margin.mine_from_neighbours`,
   the single-process miner's own function, so the exact index gives the same pairs as ``xdistill mine``.

Workers read the embedding files by path: on several hosts, ``work_dir`` must be a folder every
worker reaches under the same path (a shared mount).
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from xdistill.cluster.knn import IndexOptions, distributed_knn
from xdistill.mining.margin import MinedPairs, NeighbourLists, mine_from_neighbours
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
    """Mine pairs between two embedding ``.npy`` files, each side's search sharded across the cluster."""
    with ThreadPoolExecutor(max_workers=2) as directions:  # both at once: one's training overlaps the other's work
        searches = [
            directions.submit(distributed_knn, client, queries, corpus, k, options=options, shard_rows=shard_rows)
            for queries, corpus in ((src, tgt), (tgt, src))
        ]
        fwd, bwd = (search.result() for search in searches)
    neighbours = NeighbourLists(fwd[0], fwd[1], bwd[0], bwd[1])
    return mine_from_neighbours(neighbours, margin=margin, retrieval=retrieval)
