"""Bitext mining speed and memory: ``mine_embeddings`` vs the faiss floor vs a Python-loop miner.

Synthetic 384-d L2-normalised embeddings (30 % of the target rows are noisy copies of the
aligned source rows, the rest independent), k = 4, ratio margin, ``max`` retrieval.

Rows, for each size n (n source x n target):

1. ours end to end = ``mine_embeddings`` (exact k-NN both directions + margin + retrieval)
   vs the floor = bare faiss ``IndexFlatIP`` build + search in both directions.
   Target: ours <= 1.5x the floor.
2. ours end to end vs a reference miner with a Python loop: per query row a numpy
   similarity row + top-k (both directions), then a Python loop scoring every candidate and
   LASER's sequential one-to-one loop. Target: ours >= 5x faster. Where ``--loop-rows`` is
   smaller than n, the per-row k-NN loop runs on that many rows per direction and is
   extrapolated linearly to n (stated in the row); the scoring and one-to-one loops always
   run in full.
3. the scoring stage alone (same candidates): our vectorised margin + retrieval vs the
   Python candidate loop + sequential one-to-one loop (no target; shows where time goes).

Then a memory row: ``mine_npy`` on ``--memory-rows`` x ``--memory-rows`` embeddings written
to disk shard by shard, run in a child process whose peak RSS is measured (target < 4 GB).

    python -m bench.perf.mining                      # 1e4 and 1e5, memory 1e6 (IVF), long
    python -m bench.perf.mining --tiny               # seconds; prints, does not overwrite results
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from bench.paths import REPO_ROOT
from bench.perf.common import Row, Timing, peak_rss_mb, report_rows, time_repeats

DIM = 384
K = 4
MARGIN = "ratio"
RETRIEVAL = "max"
SPEED_TARGET_FLOOR = 1.5
SPEED_TARGET_LOOP = 5.0
MEMORY_TARGET_MB = 4096


def synthetic_block(rng: np.random.Generator, rows: int, aligned_share: float = 0.3) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` source and target embeddings; an aligned share of targets are noisy copies."""
    src = rng.standard_normal((rows, DIM), dtype=np.float32)
    src /= np.linalg.norm(src, axis=1, keepdims=True)
    tgt = rng.standard_normal((rows, DIM), dtype=np.float32)
    tgt /= np.linalg.norm(tgt, axis=1, keepdims=True)
    aligned = rng.random(rows) < aligned_share
    tgt[aligned] = src[aligned] + 0.6 * tgt[aligned]
    tgt /= np.linalg.norm(tgt, axis=1, keepdims=True)
    return src, tgt


# --- the floor: bare faiss exact k-NN in both directions -------------------------------------------


def faiss_floor(src: np.ndarray, tgt: np.ndarray) -> None:
    import faiss

    for queries, corpus in ((src, tgt), (tgt, src)):
        index = faiss.IndexFlatIP(DIM)
        index.add(corpus)
        index.search(queries, K)


# --- the Python-loop reference miner ----------------------------------------------------------------


def loop_knn(queries: np.ndarray, corpus: np.ndarray, rows: range) -> tuple[np.ndarray, np.ndarray]:
    """k-NN one query row at a time (numpy similarity row + argpartition).

    BLAS runs single-threaded here: a matrix-vector product per row is too small to split, and
    two threads waiting on each other made it 10-50x slower on the loaded 2-core machine, which
    would flatter our side.
    """
    with threadpool_limits(1):
        return _loop_knn(queries, corpus, rows)


def _loop_knn(queries: np.ndarray, corpus: np.ndarray, rows: range) -> tuple[np.ndarray, np.ndarray]:
    scores = np.zeros((len(rows), K), np.float32)
    ids = np.zeros((len(rows), K), np.int64)
    for out, row in enumerate(rows):
        similarity = corpus @ queries[row]
        top = np.argpartition(-similarity, K)[:K]
        top = top[np.argsort(-similarity[top])]
        ids[out], scores[out] = top, similarity[top]
    return scores, ids


def loop_score(queries, corpus, candidate_ids, query_means, corpus_means) -> np.ndarray:
    """Ratio margin of every candidate, one Python iteration per candidate (LASER's original)."""
    scores = np.zeros(candidate_ids.shape, np.float32)
    for i in range(candidate_ids.shape[0]):
        for j in range(candidate_ids.shape[1]):
            c = candidate_ids[i, j]
            scores[i, j] = float(queries[i] @ corpus[c]) / ((query_means[i] + corpus_means[c]) / 2)
    return scores


def loop_one_to_one(src_ids, tgt_ids, scores) -> list[tuple[int, int, float]]:
    """LASER's sequential max retrieval: walk by decreasing score, keep unused src and tgt."""
    seen_src, seen_tgt, kept = set(), set(), []
    for i in np.argsort(-scores, kind="stable"):
        s, t = int(src_ids[i]), int(tgt_ids[i])
        if s not in seen_src and t not in seen_tgt:
            seen_src.add(s)
            seen_tgt.add(t)
            kept.append((s, t, float(scores[i])))
    return kept


def loop_scoring_stage(src, tgt, fwd, bwd) -> list[tuple[int, int, float]]:
    """Means, candidate scoring loop and sequential one-to-one, from k-NN lists."""
    (fwd_scores, fwd_ids), (bwd_scores, bwd_ids) = fwd, bwd
    src_means, tgt_means = fwd_scores.mean(axis=1), bwd_scores.mean(axis=1)
    fwd_margin = loop_score(src, tgt, fwd_ids, src_means, tgt_means)
    bwd_margin = loop_score(tgt, src, bwd_ids, tgt_means, src_means)
    fwd_best = fwd_ids[np.arange(len(src)), fwd_margin.argmax(axis=1)]
    bwd_best = bwd_ids[np.arange(len(tgt)), bwd_margin.argmax(axis=1)]
    return loop_one_to_one(
        np.concatenate([np.arange(len(src)), bwd_best]),
        np.concatenate([fwd_best, np.arange(len(tgt))]),
        np.concatenate([fwd_margin.max(axis=1), bwd_margin.max(axis=1)]),
    )


# --- speed rows -----------------------------------------------------------------------------------


def speed_rows(n: int, loop_rows: int, repeats: int) -> list[Row]:
    from xdistill.mining.margin import bidirectional_knn, mine_from_neighbours

    src, tgt = synthetic_block(np.random.default_rng(n), n)
    print(f"[n={n}] timing floor and ours ({repeats} repeat(s), alternating)", flush=True)
    floor_samples, ours_samples, kept = [], [], {}

    def ours() -> None:
        # exactly what mine_embeddings does, keeping the k-NN lists for the reference's scoring stage
        kept["neighbours"] = bidirectional_knn(src, tgt, K)
        kept["pairs"] = mine_from_neighbours(kept["neighbours"], margin=MARGIN, retrieval=RETRIEVAL)

    for _ in range(repeats):  # alternate so load changes on the shared machine hit both sides
        floor_samples.append(_seconds(lambda: faiss_floor(src, tgt)))
        ours_samples.append(_seconds(ours))
    floor, ours_timing = _timing(floor_samples), _timing(ours_samples)
    neighbours, ours_pairs = kept["neighbours"], kept["pairs"]

    print(f"[n={n}] reference: per-row k-NN loop on {min(loop_rows, n)} rows per direction", flush=True)
    rows = range(min(loop_rows, n))
    knn_seconds = 0.0
    for queries, corpus in ((src, tgt), (tgt, src)):
        start = time.perf_counter()
        loop_knn(queries, corpus, rows)
        knn_seconds += (time.perf_counter() - start) * n / len(rows)
    # the scoring stage needs every row's candidates: the exact lists are identical to the loop's
    fwd = (neighbours.fwd_scores, neighbours.fwd_indices)
    bwd = (neighbours.bwd_scores, neighbours.bwd_indices)
    print(f"[n={n}] reference: Python scoring loop and one-to-one loop (full)", flush=True)
    loop_samples, reference_pairs = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        reference_pairs = loop_scoring_stage(src, tgt, fwd, bwd)
        loop_samples.append(time.perf_counter() - start)
    loop_stage = _timing(loop_samples)
    our_stage = time_repeats(lambda: mine_from_neighbours(neighbours, margin=MARGIN, retrieval=RETRIEVAL), repeats=3)
    # the reference recomputes each cosine in float32, so near-ties (~1e-7) can flip a few one-to-one choices
    reference_set = {(s, t) for s, t, _ in reference_pairs}
    ours_set = set(zip(ours_pairs.src.tolist(), ours_pairs.tgt.tolist()))
    same = reference_set == ours_set
    reference_total = knn_seconds + loop_stage.median
    extrapolated = len(rows) < n
    loop_note = (
        f"per-row k-NN loop timed on {len(rows)} of {n} rows per direction, extrapolated linearly"
        if extrapolated
        else "everything run in full"
    )
    size = f"{n:.0e} x {n:.0e}".replace("e+0", "e")
    common = {
        "n": n,
        "dim": DIM,
        "k": K,
        "margin": MARGIN,
        "retrieval": RETRIEVAL,
        "pairs": len(ours_pairs),
        "same_pairs_as_reference": same,
        "pairs_only_ours": len(ours_set - reference_set),
        "pairs_only_reference": len(reference_set - ours_set),
    }
    return [
        Row(
            f"mining {size}: ours vs bare faiss exact k-NN both directions (floor)",
            ours_timing.fmt(),
            floor.fmt(),
            f"{ours_timing.median / floor.median:.2f}x",
            f"<= {SPEED_TARGET_FLOOR}x",
            ours_timing.median / floor.median <= SPEED_TARGET_FLOOR,
            {**common, "ours_s": ours_timing.samples, "floor_s": floor.samples},
        ),
        Row(
            f"mining {size}: ours vs Python-loop miner",
            ours_timing.fmt(),
            f"{reference_total:.3g} s",
            f"{reference_total / ours_timing.median:.1f}x faster",
            f">= {SPEED_TARGET_LOOP}x faster",
            reference_total / ours_timing.median >= SPEED_TARGET_LOOP,
            {
                **common,
                "reference_knn_loop_s": knn_seconds,
                "reference_scoring_loop_s": loop_stage.median,
                "reference_note": loop_note,
            },
        ),
        Row(
            f"mining {size}: scoring stage only (margin + max retrieval)",
            our_stage.fmt(),
            loop_stage.fmt(),
            f"{loop_stage.median / our_stage.median:.0f}x faster",
            "none (breakdown)",
            None,
            common,
        ),
    ]


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _timing(samples: list[float]) -> Timing:
    return Timing(float(np.median(samples)), min(samples), max(samples), samples)


# --- memory row (child process) ------------------------------------------------------------------


def memory_child(rows: int, index: str, shard_rows: int, nprobe: int, train_rows: int, work: Path) -> dict:
    """Write rows x 384 source and target embeddings shard by shard, then mine them from disk."""
    from xdistill.mining.stream import mine_npy, write_npy_shards

    start = time.perf_counter()

    def side(which: int):  # generated lazily: one shard in memory at a time
        local = np.random.default_rng(rows)
        for first in range(0, rows, shard_rows):
            yield synthetic_block(local, min(shard_rows, rows - first))[which]

    write_npy_shards(side(0), rows, work / "src.npy")
    write_npy_shards(side(1), rows, work / "tgt.npy")
    generated = time.perf_counter() - start
    start = time.perf_counter()
    pairs = mine_npy(
        work / "src.npy",
        work / "tgt.npy",
        k=K,
        margin=MARGIN,
        retrieval=RETRIEVAL,
        shard_rows=shard_rows,
        index=index,
        nprobe=nprobe,
        train_rows=train_rows,
        progress=False,
    )
    mined = time.perf_counter() - start
    return {
        "rows": rows,
        "index": index,
        "shard_rows": shard_rows,
        "nprobe": nprobe,
        "train_rows": train_rows,
        "generate_s": generated,
        "mine_s": mined,
        "pairs": len(pairs),
        "peak_rss_mb": peak_rss_mb(),
    }


def memory_row(rows: int, index: str, shard_rows: int, nprobe: int, train_rows: int) -> Row:
    print(f"[memory] {rows} x {rows}, index {index}, shards of {shard_rows} rows (child process)", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-mining-") as work:
        command = [
            sys.executable,
            "-m",
            "bench.perf.mining",
            "--memory-child",
            str(rows),
            "--memory-index",
            index,
            "--shard-rows",
            str(shard_rows),
            "--nprobe",
            str(nprobe),
            "--train-rows",
            str(train_rows),
            "--work",
            work,
        ]
        done = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    peak = result["peak_rss_mb"]
    how = "exact" if index == "flat" else f"IVF nprobe {nprobe}"
    return Row(
        f"mining {rows:.0e} x {rows:.0e} from disk in shards ({how}): peak memory".replace("e+0", "e"),
        f"{peak:.0f} MB",
        f"{MEMORY_TARGET_MB} MB budget",
        f"{peak / MEMORY_TARGET_MB:.2f} of budget",
        f"< {MEMORY_TARGET_MB} MB",
        peak < MEMORY_TARGET_MB,
        result,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="2000 rows, memory 20000 rows exact; results not saved")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--loop-rows", type=int, default=2000, help="rows per direction of the per-row k-NN loop")
    parser.add_argument("--repeats", type=int, nargs="+", default=[3, 1], help="repeats per size")
    parser.add_argument("--memory-rows", type=int, default=1_000_000, help="0 skips the memory row")
    parser.add_argument("--memory-index", choices=("flat", "ivf"), default="ivf")
    parser.add_argument("--shard-rows", type=int, default=100_000)
    parser.add_argument("--nprobe", type=int, default=2)
    parser.add_argument("--train-rows", type=int, default=39_000, help="IVF training sample (nlist = rows/39)")
    parser.add_argument("--memory-child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child is not None:
        print(
            json.dumps(
                memory_child(
                    args.memory_child, args.memory_index, args.shard_rows, args.nprobe, args.train_rows, args.work
                )
            )
        )
        return
    if args.tiny:
        args.sizes, args.repeats, args.loop_rows = [2000], [1], 500
        args.memory_rows, args.memory_index, args.shard_rows = 20_000, "flat", 5000
    rows: list[Row] = []
    for n, repeats in zip(args.sizes, args.repeats + [args.repeats[-1]] * len(args.sizes)):
        new = speed_rows(n, args.loop_rows, repeats)
        rows += new
        _report(rows, new, args.tiny)
    if args.memory_rows:
        new = [memory_row(args.memory_rows, args.memory_index, args.shard_rows, args.nprobe, args.train_rows)]
        rows += new
        _report(rows, new, args.tiny)


def _report(rows: list[Row], new: list[Row], tiny: bool) -> None:
    """Save after every part (a long run keeps what it measured); --tiny only prints."""
    report_rows("mining", rows if not tiny else new, tiny)


if __name__ == "__main__":
    main()
