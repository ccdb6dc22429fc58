"""The GPU check's benchmark, on tiny shapes on the CPU: every row is produced and written (seconds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bench.perf import gpu_check


def test_the_tiny_cpu_run_measures_ours_and_the_reference_side_by_side(tmp_path: Path) -> None:
    out = tmp_path / "gpu_check.json"
    assert gpu_check.main(["--device", "cpu", "--tiny", "--json", str(out)]) == 0
    payload = json.loads(out.read_text(encoding="utf-8"))
    assert payload["name"] == "gpu_check" and "CPU" in payload["machine"]
    rows = {row["benchmark"].split(",")[0]: row for row in payload["rows"]}
    assert set(rows) == {"teacher encoding", "train throughput"}
    for row in rows.values():
        assert row["ours"].split()[0].replace(".", "").isdigit(), row
        assert row["reference"].split()[0].replace(".", "").isdigit(), row  # the reference ran too
        assert row["ratio"].endswith("x")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for a machine without CUDA")
def test_without_cuda_it_says_so_and_fails(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert gpu_check.main(["--json", str(tmp_path / "never.json")]) == 2
    assert "no CUDA device" in capsys.readouterr().err
    assert not (tmp_path / "never.json").exists()
