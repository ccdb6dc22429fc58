"""Assemble BENCHMARKS.md from the result files the benchmark scripts wrote.

Usage: python bench/report.py  (after running one or more bench/bench_*.py scripts)

Each bench/results/<name>.json holds the rows of one script, the exact command that produced
them, the machine and the date; this script only formats them, it never edits a number.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from common import RESULTS_DIR  # noqa: E402

HEADER = """# Benchmarks

Produced by `python bench/report.py` from `bench/results/*.json`; every row names the command that
measured it. Each benchmark runs ours and the reference side by side in one run; times are medians of
repeats with the min-max range in brackets. Targets come from issues 2-5; `make bench` re-runs every script and this report.

"""


# The pipeline's order: data, teacher, training, mining, inference, the whole pipeline.
SECTION_ORDER = ["parallel", "teacher_embed", "train", "mining", "inference", "e2e"]


def _verdict(passed: bool | None) -> str:
    return {True: "met", False: "missed", None: "-"}[passed]


def render(results_dir: Path = RESULTS_DIR) -> str:
    parts = [HEADER]
    found = {path.stem: path for path in results_dir.glob("*.json")}
    ordered = [found[name] for name in SECTION_ORDER if name in found]
    for path in ordered + [found[name] for name in sorted(set(found) - set(SECTION_ORDER))]:
        data = json.loads(path.read_text(encoding="utf-8"))
        parts.append(f"## {data['name']}\n\n")
        parts.append(f"Command: `{data['command']}`  \nMachine: {data['machine']}; date: {data['date']}\n\n")
        parts.append("| benchmark | ours | reference | ratio | target | verdict |\n|---|---|---|---|---|---|\n")
        for row in data["rows"]:
            parts.append(
                f"| {row['benchmark']} | {row['ours']} | {row['reference']} | {row['ratio']} "
                f"| {row['target']} | {_verdict(row['passed'])} |\n"
            )
        parts.append("\n")
    return "".join(parts)


def main() -> None:
    out = ROOT / "BENCHMARKS.md"
    tmp = out.with_suffix(".md.tmp")
    tmp.write_text(render(), encoding="utf-8")
    tmp.replace(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
