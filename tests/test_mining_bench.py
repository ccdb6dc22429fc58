"""The mining benchmark runs end to end at its tiny size (timings are not asserted here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_bench_mining_tiny_runs_and_reports_every_row():
    done = subprocess.run(
        [sys.executable, "-m", "bench.perf.mining", "--tiny"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| mining")]
    assert len(rows) == 4
    assert "ours vs bare faiss exact k-NN" in rows[0] and "ours vs Python-loop miner" in rows[1]
    assert "scoring stage only" in rows[2] and "peak memory" in rows[3]
    peak_mb = float(rows[3].split("|")[2].split()[0])
    assert 0 < peak_mb < 4096
