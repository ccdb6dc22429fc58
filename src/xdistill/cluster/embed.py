"""Teacher embedding of a corpus on a Dask cluster: one shard of sentences a task, resumable.

The distinct normalised sentences are cut into shards of ``shard_rows`` in input order; shard ``i``
is named by its number and a digest of its keys, so the same corpus gives the same shards on every
run. A worker (one per GPU in production) loads the teacher once and encodes the shard's sentences
that the store lacks; the client writes each finished shard's fp16 vectors to
``<work_dir>/shard-<i>-<digest>.npz`` atomically, as it arrives. When every shard is written, the
store writer (:mod:`xdistill.teacher.store_writer`) merges them into the teacher store once and
rewrites it in its canonical layout, then the shard files go.

- **Resume**: a shard whose file exists, or whose sentences are all in the store, is not encoded again.
- **A killed worker**: Dask runs its task again on another worker; the client writes a shard once
  (a file per shard) and the merge appends only keys the store lacks, so nothing is lost or duplicated.
- **Several hosts**: the sentences travel in the task and the vectors come back to the client, so
  workers need the teacher's weights, not a shared disk. Each worker checks that its teacher has
  the fingerprint the client expects (the same weights in the same precision), or the shard fails.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import logging
import shutil
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from xdistill.errors import InputFileError, XdistillError
from xdistill.io import atomic_path
from xdistill.models.precision import DEFAULT_PRECISION, check_precision
from xdistill.teacher.embed import PRECISION_SETTING, EmbedStats
from xdistill.teacher.store import (
    EMBEDDING_DTYPE,
    INDEX_FILE,
    TeacherStore,
    keys_of_normalized,
    normalized_texts,
    substore_name,
    teacher_fingerprint,
)
from xdistill.teacher.store_writer import substore_writer

if TYPE_CHECKING:
    from distributed import Client
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)

DEFAULT_SHARD_ROWS = 10_000
IN_FLIGHT_PER_WORKER = 2  # shards queued per worker: one running, one ready, the rest stay on the client


@dataclass(frozen=True)
class Shard:
    """One shard of the corpus: its keys (all its distinct sentences) and the texts it must encode."""

    number: int
    keys: np.ndarray  # KEY_DTYPE, every sentence of the shard
    todo: np.ndarray  # positions in the shard of the sentences the store lacked when planned
    texts: list[str]  # the shard's normalised texts, in corpus order (``keys`` are theirs)

    @property
    def file_name(self) -> str:
        digest = hashlib.blake2b(self.keys.tobytes(), digest_size=8).hexdigest()
        return f"shard-{self.number:06d}-{digest}.npz"


@dataclass(frozen=True)
class ShardResult:
    """What a worker sends back: the shard's new vectors (fp16, in ``todo`` order) and its teacher's identity."""

    number: int
    teacher_id: str
    vectors: np.ndarray


# --------------------------------------------------------------------------------------------
# Planning (client)
# --------------------------------------------------------------------------------------------


def plan_shards(sentences: Iterable[str], shard_rows: int, stored: TeacherStore | None) -> list[Shard]:
    """The corpus's distinct normalised sentences in shards of ``shard_rows``, with what each must encode."""
    if shard_rows < 1:
        raise XdistillError(f"shard_rows must be at least 1, got {shard_rows}")
    texts = list(dict.fromkeys(normalized_texts(sentences)))
    keys = keys_of_normalized(texts)
    have = stored.contains_keys(keys) if stored is not None else np.zeros(len(keys), bool)
    return [
        Shard(number, keys[start : start + shard_rows], np.flatnonzero(~have[start : start + shard_rows]), chunk)
        for number, start in enumerate(range(0, len(texts), shard_rows), start=1)
        for chunk in [texts[start : start + shard_rows]]
    ]


def pending_shards(shards: Sequence[Shard], work_dir: Path) -> list[Shard]:
    """Shards with something to encode and no shard file yet (a resumed run skips the others)."""
    return [s for s in shards if len(s.todo) and not (work_dir / s.file_name).is_file()]


def open_substore(store_dir: Path, teacher_id: str) -> TeacherStore | None:
    sub = store_dir / substore_name(teacher_id)
    return TeacherStore.open(sub, teacher_id=teacher_id) if (sub / INDEX_FILE).is_file() else None


# --------------------------------------------------------------------------------------------
# Encoding (worker)
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=2)
def worker_teacher(teacher_spec: str, device: str, precision: str) -> tuple[SentenceTransformer, str]:
    """The teacher of this worker process, loaded once, and its store identity."""
    from xdistill.models import load_sentence_transformer
    from xdistill.models.precision import cast_for_inference, require_gpu_for_half

    require_gpu_for_half(precision, device, PRECISION_SETTING)
    model = load_sentence_transformer(teacher_spec, device=device)
    return cast_for_inference(model, precision, PRECISION_SETTING), teacher_fingerprint(teacher_spec, precision)


def encode_shard(
    number: int,
    texts: Sequence[str],
    teacher_spec: str,
    expected_teacher_id: str,
    *,
    batch_size: int,
    device: str | None,
    precision: str,
) -> ShardResult:
    """Encode ``texts`` with the teacher (length-sorted batches, as the single-process stage does)."""
    import torch

    from xdistill.teacher.embed import encode_length_sorted

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")  # a worker per GPU sees its own as cuda
    model, teacher_id = worker_teacher(teacher_spec, device, precision)
    if teacher_id != expected_teacher_id:
        raise XdistillError(
            f"teacher {teacher_spec}: this worker's weights are {teacher_id}, the client's {expected_teacher_id}: "
            "install the same teacher on every worker host"
        )
    vectors = np.zeros((len(texts), 0), EMBEDDING_DTYPE)
    for rows, embeddings in encode_length_sorted(model, texts, batch_size, progress=False):
        if vectors.shape[1] != embeddings.shape[1]:  # the first batch tells the dimension
            vectors = np.empty((len(texts), embeddings.shape[1]), EMBEDDING_DTYPE)
        vectors[rows] = _to_half(embeddings, teacher_spec)
    return ShardResult(number, teacher_id, vectors)


def _to_half(embeddings: np.ndarray, teacher_spec: str) -> np.ndarray:
    """fp16 as the store keeps them; non-finite vectors are refused here, on the worker, naming the teacher."""
    half = embeddings.astype(EMBEDDING_DTYPE)
    if not (np.isfinite(embeddings).all() and np.isfinite(half).all()):
        raise XdistillError(f"teacher {teacher_spec}: non-finite embeddings (or beyond float16's ±65504)")
    return half


# --------------------------------------------------------------------------------------------
# Shard files and the merge (client)
# --------------------------------------------------------------------------------------------


def save_shard(work_dir: Path, shard: Shard, result: ShardResult) -> Path:
    """Write one shard's keys and vectors atomically (a killed client leaves no half-written shard)."""
    if result.vectors.shape[0] != len(shard.todo):
        raise XdistillError(f"shard {shard.number}: {result.vectors.shape[0]} vectors for {len(shard.todo)} sentences")
    path = work_dir / shard.file_name
    with atomic_path(path) as tmp, tmp.open("wb") as handle:
        np.savez(handle, keys=shard.keys[shard.todo], vectors=result.vectors, teacher_id=np.array(result.teacher_id))
    return path


def load_shard(path: Path, teacher_id: str) -> tuple[np.ndarray, np.ndarray]:
    """``(keys, vectors)`` of a shard file, refusing one written for another teacher."""
    try:
        with np.load(path, allow_pickle=False) as data:
            keys, vectors, owner = data["keys"], data["vectors"], str(data["teacher_id"])
    except (OSError, ValueError, KeyError) as exc:
        raise InputFileError(path, f"not a readable shard file ({exc}); delete it to encode the shard again") from None
    if owner != teacher_id:
        raise InputFileError(path, f"holds vectors of teacher {owner!r}, not {teacher_id!r}; delete the folder")
    return keys, vectors


def merge_shards(store_dir: Path, teacher_id: str, teacher_spec: str, paths: Sequence[Path]) -> int:
    """Append every shard's vectors the store lacks, then rewrite the store canonically; rows added."""
    added = 0
    with substore_writer(store_dir, teacher_id, teacher_spec) as writer:
        for path in paths:
            keys, vectors = load_shard(path, teacher_id)
            new = writer.missing(keys)  # a shard merged before a crash adds nothing the second time
            if len(new):
                writer.append(keys[new], vectors[new])
                added += len(new)
        writer.canonicalize()
    return added


# --------------------------------------------------------------------------------------------
# The whole job
# --------------------------------------------------------------------------------------------


def default_work_dir(store_dir: Path) -> Path:
    """``data/teacher`` -> ``data/teacher.shards``: beside the store, never inside a DVC output."""
    return store_dir.with_name(store_dir.name + ".shards")


def embed_on_cluster(
    client_factory: Any,
    store_dir: str | Path,
    teacher_spec: str,
    sentences: Iterable[str],
    *,
    work_dir: str | Path | None = None,
    shard_rows: int = DEFAULT_SHARD_ROWS,
    batch_size: int = 128,
    device: str | None = None,
    precision: str = DEFAULT_PRECISION,
) -> EmbedStats:
    """Make sure every sentence has a teacher vector in ``store_dir``, encoding the missing on the cluster.

    ``client_factory()`` is a context manager yielding a Dask client (:func:`xdistill.cluster.settings.dask_client`);
    it is entered only when there is something to encode.
    """
    check_precision(precision, PRECISION_SETTING)
    start = time.perf_counter()
    store_dir = Path(store_dir)
    work = Path(work_dir) if work_dir is not None else default_work_dir(store_dir)
    teacher_id = teacher_fingerprint(teacher_spec, precision)
    shards = plan_shards(sentences, shard_rows, open_substore(store_dir, teacher_id))
    todo = pending_shards(shards, work)
    n_requested = sum(len(s.keys) for s in shards)
    n_missing = sum(len(s.todo) for s in shards)
    logger.info(
        "teacher %s: %d distinct sentences in %d shards, %d to embed; %d shards to encode (%d done before)",
        teacher_spec,
        n_requested,
        len(shards),
        n_missing,
        len(todo),
        sum(1 for s in shards if len(s.todo)) - len(todo),
    )
    if todo:
        work.mkdir(parents=True, exist_ok=True)
        with client_factory() as client:
            for shard, result in run_shards(client, todo, teacher_spec, teacher_id, batch_size, device, precision):
                save_shard(work, shard, result)
    written = [work / s.file_name for s in shards if len(s.todo)]
    added = merge_shards(store_dir, teacher_id, teacher_spec, written) if written else 0
    shutil.rmtree(work, ignore_errors=True)
    stats = EmbedStats(n_requested, added, n_requested - added, time.perf_counter() - start)
    logger.info("teacher embeddings on the cluster: %d new, %d cached in %.1f s", added, stats.n_cached, stats.seconds)
    return stats


def run_shards(
    client: Client,
    shards: Sequence[Shard],
    teacher_spec: str,
    teacher_id: str,
    batch_size: int,
    device: str | None,
    precision: str,
) -> Iterator[tuple[Shard, ShardResult]]:
    """Encode the shards on the cluster, yielding each as it finishes; a bounded number in flight.

    Only ``IN_FLIGHT_PER_WORKER`` shards per worker are submitted at a time, so the scheduler never
    holds the whole corpus's text, and the client writes shards while the workers encode.
    """
    from distributed import as_completed

    by_number = {s.number: s for s in shards}
    queue = iter(shards)
    window = IN_FLIGHT_PER_WORKER * max(1, len(client.scheduler_info()["workers"]))

    def submit(shard: Shard) -> Any:
        texts = [shard.texts[i] for i in shard.todo]
        return client.submit(
            encode_shard,
            shard.number,
            texts,
            teacher_spec,
            teacher_id,
            batch_size=batch_size,
            device=device,
            precision=precision,
            key=f"teacher-shard-{shard.file_name}",
        )

    running = as_completed([submit(s) for s in itertools.islice(queue, window)])
    for future in running:
        result: ShardResult = future.result()
        future.release()
        yield by_number[result.number], result
        if (following := next(queue, None)) is not None:
            running.add(submit(following))
