"""Mining on a 2-worker Dask cluster vs the single-process streaming miner, side by side in one run.

Synthetic clustered 384-d unit vectors (``rows`` source x ``rows`` target; 30 % of the targets are
noisy copies of their source row: the gold pairs), written to disk shard by shard. Both sides mine
them with k = 4, ratio margin, ``max`` retrieval and the same IVF cells (``nlist`` from a training
sample of ``--train-rows``, ``--nprobe`` visited):

- reference: ``xdistill mine --index ivf``'s path (:func:`xdistill.mining.stream.mine_npy`, one IVF-Flat
  index of every target row in one process);
- ours: ``xdistill cluster-mine --index ivfpq``'s path (:func:`xdistill.cluster.mine.mine_on_cluster`): each
  side sharded across a local cluster of ``--workers`` single-threaded worker processes, IVF-PQ shards
  (48 bytes a row), each shard's candidates re-scored exactly from its rows, the margin scored on the workers.

Each side runs in a child process; rows report wall time, peak memory (each worker, the client, the
single process), recall@4 against exact search on a sample of queries, and the share of gold pairs
mined. From the cluster's task timings (per shard and per query block) a last row models what a
10^8 x 10^8 run needs: workers, memory per worker, hours.

    python -m bench.perf.cluster_mining                 # 2e5 x 2e5, a few minutes on 2 cores
    python -m bench.perf.cluster_mining --rows 1000000 --shard-rows 500000 --train-rows 78000
                                                        # the recorded 1e6 x 1e6 run: ~25 min on 2 cores
    python -m bench.perf.cluster_mining --tiny          # seconds; prints, does not overwrite results
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from bench.paths import REPO_ROOT
from bench.perf.common import Row, peak_rss_mb, report_rows

DIM = 384
K = 4
ALIGNED_SHARE = 0.3
ROWS_PER_CLUSTER = 100
TARGET_ROWS = 10**8
MODEL_SHARD_ROWS = 10**7  # a 1e8 corpus side in 10 IVF-PQ shards of 10^7 rows (~0.6 GB each)
MODEL_WORKERS = (32, 128, 512)


# --- data ----------------------------------------------------------------------------------------------


def write_corpus(rows: int, shard_rows: int, sample: int, work: Path) -> None:
    """``src.npy``, ``tgt.npy`` (clustered unit vectors), ``gold.npy`` (the aligned rows), ``sample.npy``."""
    from xdistill.mining.stream import write_npy_shards

    centres = np.random.default_rng(rows).standard_normal((max(1, rows // ROWS_PER_CLUSTER), DIM), dtype=np.float32)
    starts = range(0, rows, shard_rows)

    def block(start: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One shard of both sides, the same every time it is asked for (one shard in memory at a time)."""
        rng = np.random.default_rng([rows, start])
        n = min(shard_rows, rows - start)
        src = centres[rng.integers(0, len(centres), n)] + 0.5 * rng.standard_normal((n, DIM), dtype=np.float32)
        tgt = centres[rng.integers(0, len(centres), n)] + 0.5 * rng.standard_normal((n, DIM), dtype=np.float32)
        aligned = rng.random(n) < ALIGNED_SHARE
        tgt[aligned] = src[aligned] + 0.3 * rng.standard_normal((int(aligned.sum()), DIM), dtype=np.float32)
        return unit(src), unit(tgt), start + np.flatnonzero(aligned)

    write_npy_shards((block(start)[0] for start in starts), rows, work / "src.npy")
    write_npy_shards((block(start)[1] for start in starts), rows, work / "tgt.npy")
    np.save(work / "gold.npy", np.concatenate([block(start)[2] for start in starts]))
    # the queries whose recall is measured: evenly spaced source rows
    np.save(work / "sample.npy", np.load(work / "src.npy", mmap_mode="r")[sample_rows(rows, sample)])


def unit(matrix: np.ndarray) -> np.ndarray:
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def sample_rows(rows: int, count: int) -> np.ndarray:
    return np.linspace(0, rows - 1, min(rows, count)).astype(np.int64)


# --- the two sides (child processes) -------------------------------------------------------------------


def single_child(args: argparse.Namespace) -> dict:
    from xdistill.mining.stream import NpyRows, mine_npy, sharded_knn

    work = args.work
    start = time.perf_counter()
    pairs = mine_npy(
        work / "src.npy",
        work / "tgt.npy",
        k=K,
        shard_rows=args.shard_rows,
        index="ivf",
        nprobe=args.nprobe,
        train_rows=args.train_rows,
        progress=False,
    )
    seconds, peak = time.perf_counter() - start, peak_rss_mb()
    _, ids = sharded_knn(
        NpyRows(work / "sample.npy"),
        NpyRows(work / "tgt.npy"),
        K,
        shard_rows=args.shard_rows,
        index="ivf",
        nprobe=args.nprobe,
        train_rows=args.train_rows,
        progress=False,
    )
    np.save(work / "single_ids.npy", ids)
    np.save(work / "single_pairs.npy", np.stack([pairs.src, pairs.tgt]))
    return {"seconds": seconds, "pairs": len(pairs), "peak_rss_mb": peak}


def cluster_child(args: argparse.Namespace) -> dict:
    from distributed import get_task_stream

    from xdistill.cluster.knn import IndexOptions, distributed_knn
    from xdistill.cluster.mine import mine_on_cluster
    from xdistill.cluster.settings import ClusterSettings, dask_client

    work = args.work
    options = IndexOptions(kind="ivfpq", nprobe=args.nprobe, train_rows=args.train_rows, rerank=args.rerank)
    with dask_client(ClusterSettings(workers=args.workers)) as client:
        client.wait_for_workers(args.workers)
        start = time.perf_counter()
        with get_task_stream(client) as stream:
            pairs = mine_on_cluster(
                client, work / "src.npy", work / "tgt.npy", k=K, shard_rows=args.shard_rows, options=options
            )
        seconds, client_peak = time.perf_counter() - start, peak_rss_mb()
        worker_peaks = sorted(client.run(peak_rss_mb).values())
        _, ids = distributed_knn(
            client, work / "sample.npy", work / "tgt.npy", K, shard_rows=args.shard_rows, options=options
        )
        shard_bytes = client.submit(_shard_index_bytes, work / "tgt.npy", args.shard_rows, options).result()
    np.save(work / "cluster_ids.npy", ids)
    np.save(work / "cluster_pairs.npy", np.stack([pairs.src, pairs.tgt]))
    return {
        "seconds": seconds,
        "pairs": len(pairs),
        "worker_peak_rss_mb": worker_peaks,
        "client_peak_rss_mb": client_peak,
        "task_seconds": _task_seconds(stream.data),
        "shard_index_bytes": shard_bytes,
    }


def _shard_index_bytes(corpus: Path, shard_rows: int, options) -> int:
    """Serialised size of the first corpus shard's IVF-PQ index (what a worker holds per shard)."""
    import faiss

    from xdistill.cluster.knn import build_shard, train_ivfpq

    shard = build_shard(corpus, 0, shard_rows, "ivfpq", train_ivfpq(corpus, options), options.nprobe)
    return int(faiss.serialize_index(shard.index).nbytes)


def _task_seconds(stream: list[dict]) -> dict[str, list[float]]:
    """Busy seconds of every task, grouped by the function it ran (train, build, assign, search, merge)."""
    seconds: dict[str, list[float]] = defaultdict(list)
    for task in stream:
        compute = [s for s in task["startstops"] if s["action"] == "compute"]
        if compute:
            name = str(task["key"]).strip("()'").split("-")[0]
            seconds[name].append(sum(s["stop"] - s["start"] for s in compute))
    return dict(seconds)


# --- rows ----------------------------------------------------------------------------------------------


def run_child(side: str, args: argparse.Namespace) -> dict:
    command = [sys.executable, "-m", "bench.perf.cluster_mining", "--child", side, *_forwarded(args)]
    done = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _forwarded(args: argparse.Namespace) -> list[str]:
    names = ("rows", "shard_rows", "workers", "nprobe", "train_rows", "rerank", "sample", "work")
    return [item for name in names for item in (f"--{name.replace('_', '-')}", str(getattr(args, name)))]


def recall_of(ids_file: Path, exact: np.ndarray) -> float:
    from xdistill.cluster.knn import recall_at_k

    return recall_at_k(np.load(ids_file), exact)


def exact_sample_ids(work: Path) -> np.ndarray:
    from xdistill.mining.stream import NpyRows, sharded_knn

    _, ids = sharded_knn(NpyRows(work / "sample.npy"), NpyRows(work / "tgt.npy"), K, shard_rows=200_000, progress=False)
    return ids


def gold_found(pairs_file: Path, work: Path) -> float:
    """Share of the gold pairs (source row i, its noisy copy i) among the mined pairs."""
    src, tgt = np.load(pairs_file)
    gold = np.load(work / "gold.npy")
    found = set(src[src == tgt].tolist())
    return len(found.intersection(gold.tolist())) / max(1, len(gold))


def rows_of(args: argparse.Namespace, single: dict, ours: dict, recall: dict, gold: dict) -> list[Row]:
    size = f"{args.rows:.0e} x {args.rows:.0e}".replace("e+0", "e")
    how = f"{args.workers} workers x 1 thread, IVF-PQ shards of {args.shard_rows} rows, nprobe {args.nprobe}"
    details = {"rows": args.rows, "dim": DIM, "k": K, "workers": args.workers, "shard_rows": args.shard_rows}
    worker_peak = max(ours["worker_peak_rss_mb"])
    return [
        Row(
            f"cluster mining {size}: wall time ({how}) vs single-process IVF (`xdistill mine --index ivf`)",
            f"{ours['seconds']:.0f} s",
            f"{single['seconds']:.0f} s",
            f"{single['seconds'] / ours['seconds']:.2f}x faster",
            "none (measured)",
            None,
            {**details, "cluster": ours, "single": single},
        ),
        Row(
            f"cluster mining {size}: peak memory per worker (client apart) vs the single process",
            f"{worker_peak:.0f} MB per worker (workers {', '.join(f'{m:.0f}' for m in ours['worker_peak_rss_mb'])}; "
            f"client {ours['client_peak_rss_mb']:.0f} MB)",
            f"{single['peak_rss_mb']:.0f} MB",
            f"{worker_peak / single['peak_rss_mb']:.2f}",
            "none (measured)",
            None,
            {
                **details,
                "reference_note": "peak RSS of a worker counts the pages of the embedding file it maps to re-score "
                "candidates exactly (page cache the OS can reclaim), besides its IVF-PQ shards",
            },
        ),
        Row(
            f"cluster mining {size}: recall@{K} against exact search ({args.sample} sampled queries)",
            f"{recall['cluster']:.3f} (IVF-PQ, re-scored {args.rerank} x k)",
            f"{recall['single']:.3f} (IVF-Flat)",
            f"{recall['cluster'] - recall['single']:+.3f}",
            ">= 0.9",
            recall["cluster"] >= 0.9,
            details,
        ),
        Row(
            f"cluster mining {size}: gold pairs mined (noisy copies, {ALIGNED_SHARE:.0%} of the rows)",
            f"{gold['cluster']:.3f}",
            f"{gold['single']:.3f}",
            f"{gold['cluster'] - gold['single']:+.3f}",
            "none (measured)",
            None,
            details,
        ),
        model_row(args, ours),
    ]


def model_row(args: argparse.Namespace, ours: dict) -> Row:
    """What 10^8 x 10^8 needs, scaled from this run's per-task costs (both directions, one core a worker)."""
    tasks = {name: float(np.mean(values)) for name, values in ours["task_seconds"].items()}
    n, n_big = args.rows, TARGET_ROWS
    nlist = max(1, min(int(4 * math.sqrt(n)), args.train_rows // 39))
    nlist_big = int(4 * math.sqrt(n_big))
    shards = -(-n // args.shard_rows)
    shards_big = n_big // MODEL_SHARD_ROWS
    block = args.shard_rows  # query rows per block
    # unit costs measured here
    assign_unit = tasks.get("assign_block", 0.0) / (block * nlist)  # s per query per IVF cell
    scan_unit = tasks.get("search_shard", 0.0) / (block * args.nprobe * args.shard_rows / nlist)  # s per code read
    merge_unit = tasks.get("merge_block", 0.0) / (block * shards)  # s per query per shard list
    build_unit = tasks.get("build_shard", 0.0) / args.shard_rows  # s per row added
    train_unit = tasks.get("train_ivfpq", 0.0) / (min(n, args.train_rows) * nlist)  # s per sample row per cell
    per_direction = (
        n_big * (nlist_big * assign_unit + args.nprobe * (n_big / nlist_big) * scan_unit + shards_big * merge_unit)
        + n_big * build_unit
        + 39 * nlist_big * nlist_big * train_unit
    )
    core_hours = 2 * per_direction / 3600
    busy = sum(sum(values) for values in ours["task_seconds"].values())
    efficiency = busy / (ours["seconds"] * args.workers)
    shard_gb = ours["shard_index_bytes"] / args.shard_rows * MODEL_SHARD_ROWS / 1e9
    quantizer_gb = nlist_big * DIM * 4 / 1e9
    hours = {w: core_hours / (w * efficiency) for w in MODEL_WORKERS}
    memory = {w: (-(-2 * shards_big // w)) * (shard_gb + quantizer_gb) + 1.0 for w in MODEL_WORKERS}
    # the client: each row's neighbour mean (float64) and best candidate (two int64 ids, a float32 score) in both
    # directions, doubled for retrieval's temporaries; the k-NN lists stay on the workers
    client_gb = 2 * n_big * (8 + 20) * 2 / 1e9
    table = "; ".join(f"{w} workers: {hours[w]:.1f} h, {memory[w]:.1f} GB each" for w in MODEL_WORKERS)
    note = (
        f"model of 1e8 x 1e8 from this run's per-task costs: nlist {nlist_big} (4 sqrt n), nprobe {args.nprobe}, "
        f"{shards_big} IVF-PQ shards of {MODEL_SHARD_ROWS:.0e} rows per side ({shard_gb:.2f} GB each + a "
        f"{quantizer_gb:.2f} GB copy of the coarse quantizer); costs per query scale with nlist (cell assignment, once "
        f"per block), with nprobe x n/nlist (codes scanned over all shards, each shard's exact re-scoring of its "
        f"candidates counted with them: an over-estimate for larger shards) and with the shard count (merge), build "
        f"per row, training with 39 nlist^2; {core_hours:.0f} single-core worker-hours in all, divided by the workers "
        f"at this run's parallel efficiency ({efficiency:.2f}): {table}. The k-NN lists stay on the workers, which "
        f"margin-score them; the client holds each row's neighbour mean and best candidate in both directions: "
        f"~{client_gb:.0f} GB. Encoding (GPU time) not included."
    )
    return Row(
        "cluster mining model 1e8 x 1e8: single-core worker-hours, hours and memory per worker",
        f"{core_hours:.0f} worker-h; {hours[MODEL_WORKERS[1]]:.1f} h on {MODEL_WORKERS[1]} workers, "
        f"{memory[MODEL_WORKERS[1]]:.1f} GB each",
        "none (model)",
        "-",
        "none (model)",
        None,
        {
            "reference_note": note,
            "unit_costs_s": {
                "assign_per_query_cell": assign_unit,
                "scan_per_code": scan_unit,
                "merge_per_query_shard": merge_unit,
                "build_per_row": build_unit,
                "train_per_row_cell": train_unit,
            },
            "parallel_efficiency": efficiency,
            "hours_by_workers": hours,
            "memory_gb_by_workers": memory,
            "client_gb": client_gb,
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="20000 rows; results printed, not saved")
    parser.add_argument("--rows", type=int, default=200_000, help="source rows = target rows")
    parser.add_argument("--shard-rows", type=int, default=50_000, help="rows per shard and per query block")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--nprobe", type=int, default=16)
    parser.add_argument("--train-rows", type=int, default=39_000, help="IVF training sample (nlist = rows/39)")
    parser.add_argument("--rerank", type=int, default=16)
    parser.add_argument("--sample", type=int, default=2000, help="queries whose recall is measured")
    parser.add_argument("--child", choices=("single", "cluster"), default=None, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps((single_child if args.child == "single" else cluster_child)(args)))
        return
    if args.tiny:
        args.rows, args.shard_rows, args.train_rows, args.sample = 20_000, 5_000, 10_000, 500
    with tempfile.TemporaryDirectory(prefix="bench-cluster-mining-") as folder:
        args.work = Path(folder)
        print(f"[data] {args.rows} x {args.rows} clustered vectors", flush=True)
        write_corpus(args.rows, args.shard_rows, args.sample, args.work)
        print("[single] xdistill mine --index ivf path (child process)", flush=True)
        single = run_child("single", args)
        print(f"[cluster] {args.workers}-worker local cluster (child process)", flush=True)
        ours = run_child("cluster", args)
        print("[recall] exact search of the sample", flush=True)
        exact = exact_sample_ids(args.work)
        recall = {side: recall_of(args.work / f"{side}_ids.npy", exact) for side in ("single", "cluster")}
        gold = {side: gold_found(args.work / f"{side}_pairs.npy", args.work) for side in ("single", "cluster")}
    report_rows("cluster_mining", rows_of(args, single, ours, recall, gold), args.tiny)


if __name__ == "__main__":
    main()
