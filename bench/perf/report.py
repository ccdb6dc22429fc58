"""Assemble BENCHMARKS.md from the result files the benchmark scripts wrote.

Usage: python -m bench.perf.report  (after running one or more of the bench/perf/ benchmarks)

Each bench/results/<name>.json holds the rows of one script, the exact command that produced
them, the machine and the date; this script only formats them, it never edits a number.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from bench.paths import REPO_ROOT, RESULTS_DIR

HEADER = """# Benchmarks

Produced by `python -m bench.perf.report` from `bench/results/*.json`; every row names the command that
measured it. Each benchmark runs ours and the reference side by side in one run; times are medians of
repeats with the min-max range in brackets. Each script states its targets; `make bench` re-runs every script \
and this report.

"""


# The pipeline's order: data, teacher, training, mining, inference, exports, the whole pipeline.
SECTION_ORDER = [
    "parallel",
    "teacher_embed",
    "train",
    "mining",
    "cluster_mining",
    "inference",
    "export",
    "vocabulary",
    "e2e",
    "gpu_check",
]

# What a reader needs to read a section's numbers right (facts about the tools, not results).
SECTION_NOTES = {
    "e2e": (
        "DVC restores a stage from its run cache only when all its outputs are cached and none "
        "persists (the stages listed as restored above); the stages whose metrics, plots and reports are "
        "committed to git (`cache: false`, the example-get-started layout) and the persistent teacher "
        "store re-run in a new workspace. A clone of the committed repository gets those outputs from git "
        "and `dvc pull` instead, after which `dvc repro` has nothing to do (as in the 'nothing changed' row)."
    ),
}


def _stages_line(row: dict) -> str:
    details = row.get("details") or {}
    if "stages_run" not in details:
        return ""
    restored = ", ".join(details.get("stages_restored") or []) or "none"
    return (
        f"- {row['benchmark'].split(' (')[0]}: ran {', '.join(details['stages_run']) or 'nothing'}; "
        f"restored from the run cache: {restored}\n"
    )


# The code each benchmark times: a results file older than a change there measured other code.
SECTION_SOURCES = {
    "parallel": ["src/xdistill/data"],
    "teacher_embed": ["src/xdistill/teacher"],
    "train": ["src/xdistill/training"],
    "mining": ["src/xdistill/mining"],
    "cluster_mining": ["src/xdistill/cluster", "src/xdistill/mining"],
    "inference": ["src/xdistill/export", "src/xdistill/models"],
    "export": ["src/xdistill/export", "src/xdistill/models"],
    "vocabulary": ["src/xdistill/models/vocabulary.py"],
    "e2e": ["dvc.yaml", "params.yaml"],  # their parsed content, and the code the stages import: _pipeline_code()
    "gpu_check": ["src/xdistill/training", "src/xdistill/teacher"],
}


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def _pipeline_code() -> list[str]:
    """The source files the pipeline's stages import (their ``src/`` deps in dvc.yaml): what ``dvc repro`` runs."""
    stages = (yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text(encoding="utf-8")) or {}).get("stages") or {}
    deps = {dep for stage in stages.values() for dep in stage.get("deps") or [] if isinstance(dep, str)}
    return sorted(dep for dep in deps if dep.startswith("src/"))


def _parsed(commit: str, file: str) -> object:
    """A YAML file's content at ``commit``, parsed: a comment or layout change is no change."""
    return yaml.safe_load(_git("show", f"{commit}:{file}") or "null")


def freshness_line(name: str, results_file: Path) -> str:
    """Which commit the results came in with, and whether the code they time changed after it."""
    measured = _git("log", "-1", "--format=%h", "--", str(results_file.relative_to(REPO_ROOT)))
    if not measured:
        return ""
    sources = SECTION_SOURCES.get(name)
    if name == "e2e" and sources:
        later = _git("log", "--format=%h", f"{measured}..HEAD", "--", *_pipeline_code()).split()
        later += [file for file in sources if _parsed(measured, file) != _parsed("HEAD", file)]
        if not later:
            return (
                f"Results committed in {measured}; the pipeline they time (dvc.yaml, params.yaml and the code its "
                "stages import) is unchanged since.\n\n"
            )
        return (
            f"Results committed in {measured}; **the pipeline they time changed since** "
            f"({len(later)} commit(s) or files: {', '.join(later[:5])}{', ...' if len(later) > 5 else ''}): "
            f"re-run `{name}` to measure it.\n\n"
        )
    if not sources:
        return f"Results committed in {measured}.\n\n"
    later = _git("log", "--format=%h", f"{measured}..HEAD", "--", *sources).split()
    if not later:
        return f"Results committed in {measured}; the code they time ({', '.join(sources)}) is unchanged since.\n\n"
    return (
        f"Results committed in {measured}; **the code they time changed since** in {len(later)} commit(s) "
        f"({', '.join(later[:5])}{', ...' if len(later) > 5 else ''}): re-run `{name}` to measure the current code.\n\n"
    )


def _notes(rows: list[dict]) -> str:
    """Qualifications a row carries (e.g. a reference extrapolated from a sample), shown under its table."""
    notes = [
        f"- {row['benchmark']}: {row['details']['reference_note']}\n"
        for row in rows
        if (row.get("details") or {}).get("reference_note")
    ]
    return "".join(notes)


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
        stages = "".join(_stages_line(row) for row in data["rows"]) + _notes(data["rows"])
        parts.append(f"\n{stages}\n" if stages else "\n")
        parts.append(freshness_line(path.stem, path))
        if data["name"] in SECTION_NOTES:
            parts.append(SECTION_NOTES[data["name"]] + "\n\n")
    if "gpu_check" not in found:  # measured on a GPU machine only: what it measures, until it has run there
        from bench.perf.gpu_check import PENDING_SECTION

        parts.append(PENDING_SECTION)
    return "".join(parts)


def main() -> None:
    out = REPO_ROOT / "BENCHMARKS.md"
    tmp = out.with_suffix(".md.tmp")
    tmp.write_text(render(), encoding="utf-8")
    tmp.replace(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
