"""Shared helpers for the regression benchmarks in bench/perf/.

Every benchmark runs ours and the reference side by side in one process, repeats each
measurement (the machines are noisy), and reports medians with min-max and the ratio.
Each script writes its rows to ``bench/results/<name>.json`` through :func:`save_rows`;
``python -m bench.perf.report`` assembles ``BENCHMARKS.md`` from those files.
"""

from __future__ import annotations

import gzip
import json
import os
import resource
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from bench.machine import machine_summary
from bench.paths import REPO_ROOT, RESULTS_DIR, mirror_dir, portable_paths


@dataclass
class Timing:
    """Median and range of repeated wall-clock measurements, in seconds."""

    median: float
    low: float
    high: float
    samples: list[float] = field(default_factory=list)

    def fmt(self, unit: str = "s") -> str:
        return f"{self.median:.3g} {unit} ({self.low:.3g}-{self.high:.3g})"


def time_repeats(fn: Callable[[], Any], repeats: int = 3, warmup: int = 0) -> Timing:
    """Run ``fn`` ``warmup`` times untimed, then ``repeats`` times timed."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return Timing(statistics.median(samples), min(samples), max(samples), samples)


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclass
class Row:
    """One line of the BENCHMARKS.md table."""

    benchmark: str
    ours: str
    reference: str
    ratio: str
    target: str
    passed: bool | None
    details: dict[str, Any] = field(default_factory=dict)


def save_rows(name: str, rows: list[Row], argv: list[str] | None = None) -> Path:
    """Store a script's rows with the exact command, machine and date that produced them."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    argv = sys.argv if argv is None else argv
    payload = {
        "name": name,
        "command": " ".join(["python -m", module_name(argv[0]), *(shlex.quote(a) for a in argv[1:])]),
        "machine": machine_summary(),
        "date": date.today().isoformat(),
        "rows": portable_paths([asdict(r) for r in rows]),
    }
    path = RESULTS_DIR / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    print_rows(rows)
    return path


def module_name(script: str) -> str:
    """``bench/perf/train.py`` (a path, as ``sys.argv[0]`` holds it under ``python -m``) -> ``bench.perf.train``."""
    relative = Path(os.path.relpath(script, REPO_ROOT)).with_suffix("")
    return ".".join(relative.parts)


def print_rows(rows: list[Row]) -> None:
    for r in rows:
        print(f"| {r.benchmark} | {r.ours} | {r.reference} | {r.ratio} | {r.target} | {r.passed} |")


def report_rows(name: str, rows: list[Row], tiny: bool, json_path: str | Path | None = None) -> None:
    """Record a full run's rows (:func:`save_rows`); a ``--tiny`` smoke run only prints them.

    A tiny run never overwrites the recorded results; ``json_path`` (e.g. a test's temp file) gets
    its rows as JSON for inspection.
    """
    if tiny:
        print_rows(rows)
    else:
        print(f"wrote {save_rows(name, rows)}")
    if json_path:
        Path(json_path).write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n", encoding="utf-8")


def real_sentences(count: int) -> list[str]:
    """Distinct English sentences: short Tatoeba and long WMT news ones, half each (interleaved)."""
    from xdistill.data.normalize import normalize_text

    train = mirror_dir() / "train"
    sources = {
        train / "tatoeba-challenge/tatoeba-challenge.minus-laser-test.en-de.tsv.gz": 0,
        train / "wmt-newstest/newstest.en-de.tsv.gz": 1,
    }
    pools = []
    for path, column in sources.items():
        if not path.is_file():
            sys.exit(f"error: {path}: corpora mirror file not found (set XDISTILL_MIRROR)")
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            next(handle)
            pool = dict.fromkeys(normalize_text(line.split("\t")[column]) for _, line in zip(range(count * 2), handle))
            pools.append(list(pool))
    mixed = list(dict.fromkeys(s for pair in zip(*pools) for s in pair if s))
    if len(mixed) < count:
        sys.exit(f"error: only {len(mixed)} distinct sentences available, asked for {count}")
    return mixed[:count]


def alternate(ours: Callable[[], object], reference: Callable[[], object], repeats: int) -> tuple[Timing, Timing]:
    """Time both sides ``repeats`` times, alternating, so machine load drifts hit both alike."""
    samples: dict[str, list[float]] = {"ours": [], "reference": []}
    for _ in range(repeats):
        for name, fn in (("reference", reference), ("ours", ours)):
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    timings = [Timing(statistics.median(s), min(s), max(s), s) for s in (samples["ours"], samples["reference"])]
    return timings[0], timings[1]


def throughput_row(name: str, n: int, ours: Timing, reference: Timing, details: dict, target: float = 1.0) -> Row:
    def rate(t: Timing) -> str:
        return f"{n / t.median:.0f} sent/s ({n / t.high:.0f}-{n / t.low:.0f})"

    ratio = reference.median / ours.median
    return Row(
        benchmark=name,
        ours=rate(ours),
        reference=rate(reference),
        ratio=f"{ratio:.2f}x",
        target=f">= {target:.2f}x",
        passed=ratio >= target,
        details={**details, "ours_s": ours.samples, "reference_s": reference.samples},
    )
