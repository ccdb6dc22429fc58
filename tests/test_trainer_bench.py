"""The training-throughput benchmark runs end to end at its tiny size (timings are not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_bench_train_tiny_runs_both_trainers_and_reports_the_ratio(tmp_path: Path) -> None:
    recorded = (ROOT / "bench" / "results" / "train.json").read_bytes()
    rows_file = tmp_path / "rows.json"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_train.py"), "--tiny", "--json", str(rows_file)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| train throughput")]
    assert len(rows) == 1 and "SentenceTransformerTrainer + MSELoss" in rows[0]
    row = json.loads(rows_file.read_text())[0]
    ours, reference = row["details"]["ours"]["pairs_per_second"], row["details"]["reference"]["pairs_per_second"]
    assert ours > 0 and reference > 0
    assert row["ratio"] == f"{ours / reference:.2f}x"
    assert (ROOT / "bench" / "results" / "train.json").read_bytes() == recorded  # a tiny run records nothing
