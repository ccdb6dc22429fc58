"""The training-throughput benchmark runs end to end at its tiny size (timings are not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_bench_train_tiny_runs_both_trainers_and_reports_the_ratio(tmp_path: Path) -> None:
    recorded = (ROOT / "bench" / "results" / "train.json").read_bytes()
    rows_file = tmp_path / "rows.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.perf.train", "--tiny", "--bf16", "--json", str(rows_file)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| train throughput")]
    assert len(rows) == 6 and all("SentenceTransformerTrainer + MSELoss" in r for r in rows[:2])
    assert "additive_margin_softmax" in rows[1]  # the default loss of params.yaml, named in its row
    assert "ours in fp32" in rows[2] and "bf16=True" in rows[3]
    mse_row, default_row, gain_row, bf16_row, cached_row, cached_run_row = json.loads(rows_file.read_text())
    details = mse_row["details"]
    reference = details["reference"]["pairs_per_second"]
    for row, ours in ((mse_row, details["ours"]), (default_row, details["ours_default_loss"])):
        assert ours["pairs_per_second"] > 0 and reference > 0
        assert row["ratio"] == f"{ours['pairs_per_second'] / reference:.2f}x"
    bf16 = details["ours_default_loss_bf16"]["pairs_per_second"]
    assert gain_row["ratio"] == f"{bf16 / details['ours_default_loss']['pairs_per_second']:.2f}x"
    assert bf16_row["ratio"] == f"{bf16 / details['reference_bf16']['pairs_per_second']:.2f}x"
    # bf16 autocast really ran: the same data, seed and loss, yet not the fp32 run's loss
    assert details["ours_default_loss_bf16"]["train_loss_last"] != details["ours_default_loss"]["train_loss_last"]
    # the two runs of ours trained with different losses, so their last losses differ
    assert details["ours"]["train_loss_last"] != details["ours_default_loss"]["train_loss_last"]
    # the cached frozen layers against the same layers run at every step: the ratio of their step rates
    frozen = cached_row["details"]
    assert "cache_frozen true vs false" in cached_row["benchmark"] and frozen["frozen_layers"] == 1
    cached, uncached = frozen["ours_frozen_cached"], frozen["ours_frozen"]
    assert cached_row["ratio"] == f"{cached['pairs_per_second'] / uncached['pairs_per_second']:.2f}x"
    assert cached["frozen_cache"]["texts"] == 2 * details["pairs"] and uncached["frozen_cache"] is None
    assert f"{cached['frozen_cache']['seconds']:.1f} s states" in cached_run_row["ours"]
    assert (ROOT / "bench" / "results" / "train.json").read_bytes() == recorded  # a tiny run records nothing
