"""The training-throughput benchmark runs end to end at its tiny size (timings are not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_bench_train_tiny_runs_both_trainers_and_reports_the_ratio() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_train.py"), "--tiny"], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| train throughput")]
    assert len(rows) == 1 and "SentenceTransformerTrainer + MSELoss" in rows[0]
    result = json.loads((ROOT / "bench" / "results" / "bench_train_tiny.json").read_text())
    details = result["rows"][0]["details"]
    ours, reference = details["ours"]["pairs_per_second"], details["reference"]["pairs_per_second"]
    assert ours > 0 and reference > 0
    assert result["rows"][0]["ratio"] == f"{ours / reference:.2f}x"
