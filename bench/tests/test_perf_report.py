"""BENCHMARKS.md's assembly (bench.perf.report): a row's qualification and whether its code changed since."""

from __future__ import annotations

from bench.paths import RESULTS_DIR
from bench.perf.report import _notes, freshness_line


def test_benchmarks_md_shows_a_rows_qualification_and_whether_its_code_changed_since() -> None:
    rows = [
        {"benchmark": "mining 1e5", "details": {"reference_note": "loop timed on 2000 rows, extrapolated"}},
        {"benchmark": "mining 1e4", "details": {}},
    ]
    assert _notes(rows) == "- mining 1e5: loop timed on 2000 rows, extrapolated\n"
    line = freshness_line("mining", RESULTS_DIR / "mining.json")
    assert line.startswith("Results committed in ") and ("unchanged since" in line or "changed since" in line)
