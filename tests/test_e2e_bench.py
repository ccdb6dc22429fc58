"""The benchmark ``python -m bench.perf.e2e`` runs end to end at its tiny size: cold, warm caches, no-op,
train-only change."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.pipeline_project import pipeline_stages

ROOT = Path(__file__).resolve().parent.parent
ALL_STAGES = pipeline_stages()


@pytest.mark.slow
def test_bench_e2e_tiny_measures_cold_warm_noop_and_train_change(tmp_path: Path) -> None:
    rows_file = tmp_path / "rows.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.perf.e2e", "--tiny", "--json", str(rows_file)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    cold, warm, noop, retrain = (row["details"] for row in json.loads(rows_file.read_text()))
    assert cold["stages_run"] == ALL_STAGES
    assert noop["stages_run"] == [] and noop["wall_s"] < cold["wall_s"]
    assert retrain["stages_run"] == ["train", "evaluate", "register", "promote"]
    # a new workspace on warm caches computes less than a cold one
    assert len(warm["stages_run"]) < len(ALL_STAGES) or warm["wall_s"] < cold["wall_s"]
    # its teacher store, copied from the shared store, holds the files the cold one encoded (the
    # store's canonical layout), so the adapter of the same starting student comes from the run cache
    assert "start_adapter" in warm["stages_restored"], warm
    for details in (cold, warm, noop, retrain):
        assert details["peak_mb"] > 0
