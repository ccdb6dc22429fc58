"""The Prefect flow ``corpus-embed``: teacher vectors for a large corpus, its shards encoded on a Dask cluster.

Steps (the engine is :mod:`xdistill.cluster.embed`; this flow only orders them):

1. plan: the corpus's distinct sentences in shards; shards whose sentences are all in the store, or
   whose shard file a stopped run already wrote, are skipped (resume);
2. encode: one ``encode-shard`` task per remaining shard, run by prefect-dask's ``DaskTaskRunner`` on
   the Dask workers (one per GPU in production); a killed worker's shard runs again elsewhere;
3. save: each shard's vectors go to a shard file as the task finishes;
4. merge: the store writer adds them to the teacher store once and rewrites it canonically.

The Dask cluster: ``XDISTILL_SCHEDULER`` (a running scheduler's address, e.g. set in the deployment's
job variables) or, unset, a local cluster of ``XDISTILL_DASK_WORKERS`` (default 2) worker processes
started for the run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.futures import as_completed
from prefect_dask import DaskTaskRunner
from pydantic import MISSING

from flows.run_form import is_set
from xdistill.cluster.embed import (
    DEFAULT_SHARD_ROWS,
    ShardResult,
    default_work_dir,
    encode_shard,
    merge_shards,
    open_substore,
    pending_shards,
    plan_shards,
    save_shard,
)
from xdistill.cluster.settings import DEFAULT_WORKERS, SCHEDULER_ENV
from xdistill.teacher.store import teacher_fingerprint

WORKERS_ENV = "XDISTILL_DASK_WORKERS"


def dask_task_runner() -> DaskTaskRunner:
    """The configured scheduler, or a local cluster of single-threaded worker processes."""
    if address := os.environ.get(SCHEDULER_ENV, ""):
        return DaskTaskRunner(address=address)
    workers = int(os.environ.get(WORKERS_ENV, DEFAULT_WORKERS))
    return DaskTaskRunner(
        cluster_kwargs={
            "n_workers": workers,
            "threads_per_worker": 1,
            "processes": True,
            "dashboard_address": None,
        }
    )


@task(name="encode-shard", retries=2, task_run_name="encode-shard-{number}")
def encode_shard_task(number: int, texts: list[str], teacher: str, teacher_id: str, **options: Any) -> ShardResult:
    return encode_shard(number, texts, teacher, teacher_id, **options)


@task(name="merge-into-store")
def merge_task(store: Path, teacher_id: str, teacher: str, paths: list[Path]) -> int:
    return merge_shards(store, teacher_id, teacher, paths)


@flow(name="corpus-embed", task_runner=dask_task_runner())
def corpus_embed(
    corpus: list[str],
    teacher: str,
    store: str = "data/teacher",
    work_dir: str | MISSING = MISSING,
    shard_rows: int = DEFAULT_SHARD_ROWS,
    batch_size: int = 128,
    device: str | MISSING = MISSING,
    precision: str = "fp32",
) -> dict[str, int]:
    """Embed every distinct sentence of the corpus files with the teacher into the teacher store.

    Args:
        corpus: Corpus files: parallel TSVs (their source column) or text files, one sentence a line.
        teacher: The teacher's model spec (params.yaml models.teacher).
        store: The teacher store folder.
        work_dir: Where shard files wait for the merge (default: <store>.shards); a rerun resumes from it.
        shard_rows: Sentences per encode-shard task.
        batch_size: Sentences per forward pass.
        device: Torch device of the workers (default: cuda where present).
        precision: The teacher's number format: fp32, or fp16 / bf16 on GPUs.
    """
    from xdistill.cli.cluster_embed import read_corpus

    log = get_run_logger()
    store_dir = Path(store)
    work = Path(work_dir) if is_set(work_dir) else default_work_dir(store_dir)
    teacher_id = teacher_fingerprint(teacher, precision)
    shards = plan_shards(read_corpus(tuple(Path(p) for p in corpus)), shard_rows, open_substore(store_dir, teacher_id))
    todo = pending_shards(shards, work)
    log.info("%d shards, %d to encode", len(shards), len(todo))
    work.mkdir(parents=True, exist_ok=True)
    options = {"batch_size": batch_size, "device": device if is_set(device) else None, "precision": precision}
    futures = [
        encode_shard_task.submit(s.number, [s.texts[i] for i in s.todo], teacher, teacher_id, **options) for s in todo
    ]
    by_number = {s.number: s for s in todo}
    for future in as_completed(futures):
        result = future.result()
        save_shard(work, by_number[result.number], result)
    written = [work / s.file_name for s in shards if len(s.todo)]
    added = merge_task(store_dir, teacher_id, teacher, written) if written else 0
    for path in written:
        path.unlink(missing_ok=True)
    if work.is_dir() and not any(work.iterdir()):
        work.rmdir()
    requested = sum(len(s.keys) for s in shards)
    log.info("%d sentences: %d embedded now, %d already in the store", requested, added, requested - added)
    return {"requested": requested, "new": added, "cached": requested - added}
