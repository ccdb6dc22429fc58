"""The benchmark ``python -m bench.perf.inference`` runs end to end at its tiny size (timings are not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_bench_inference_tiny_reports_encoding_and_index_rows(tmp_path: Path) -> None:
    rows_file = tmp_path / "rows.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.perf.inference",
            "--tiny",
            "--student",
            "pypi:all-minilm-l6-v2",
            "--json",
            str(rows_file),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    encode, index = json.loads(rows_file.read_text())
    assert encode["details"]["same_vectors"]  # both ways give the same embeddings
    assert index["details"]["low"]["dimension"] == 128 and index["details"]["full"]["dimension"] == 384
    # a float32 flat index is 4 bytes per dimension: the 128-d one is 3x smaller
    assert index["details"]["full"]["index_mb"] / index["details"]["low"]["index_mb"] == pytest.approx(3.0, rel=0.01)
    assert (
        not (ROOT / "bench" / "results" / "inference.json").exists()
        or "--tiny" not in json.loads((ROOT / "bench" / "results" / "inference.json").read_text())["command"]
    )


def test_bench_inference_without_a_student_says_what_to_do(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.perf.inference", "--tiny", "--student", str(tmp_path / "missing")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0 and "run `dvc repro` first" in done.stderr
