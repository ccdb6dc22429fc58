"""The benchmark ``python -m bench.perf.parallel`` runs end to end at its tiny size and its two chains agree."""

from __future__ import annotations

import json
import subprocess
import sys


def test_bench_parallel_tiny_runs(repo_root, tmp_path):
    out = tmp_path / "rows.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.perf.parallel", "--tiny", "--json", str(out)],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(out.read_text())
    assert [r["benchmark"].split(",")[0] for r in rows] == [
        "cleaning chain",
        "cleaning chain",
        "peak memory 2e+04 vs 2e+03 lines",
    ]
    for row in rows[:2]:
        ours, reference = row["details"]["ours"], row["details"]["reference"]
        assert ours["kept"] == reference["kept"] > 0  # the same chain, the same survivors
        assert ours["cpu_s"] > 0 and ours["peak_rss_mb"] > 0
