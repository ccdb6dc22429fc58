"""RESULTS.md's teacher-space adapter sweeps (bench/probes/teacher_adapter_sweep.py): the settings chosen on dev."""

from __future__ import annotations

import json
from pathlib import Path


def experiment_member(results: Path, commit: str | None) -> str:
    """The quality member whose DVC experiment commit is ``commit`` (its run.json), else the commit itself."""
    for run in sorted(results.glob("*/run.json")):
        if commit and commit in json.dumps(json.loads(run.read_text()).get("flow_result")):
            return f"`{run.parent.name}`"
    return f"experiment commit `{commit}`" if commit else "an unrecorded member"


def adapter_sweep_section(diagnostics: Path, results: Path) -> str:
    """The teacher-space adapter's settings compared on one member's student (bench/probes/teacher_adapter_sweep.py):
    one row per variant of each sweep file, the dev columns that chose and the FLORES columns that only report."""
    sweeps = [json.loads(path.read_text()) for path in sorted(diagnostics.glob("teacher_adapter_sweep*.json"))]
    if not sweeps:
        return ""
    students = sorted({experiment_member(results, sweep.get("student_commit")) for sweep in sweeps})
    rows = []
    for number, sweep in enumerate(sweeps, 1):
        for name, variant in sweep["variants"].items():
            changed = ", ".join(f"{k}={v:g}" for k, v in variant["overrides"].items()) or "the defaults"
            chosen = "chosen" if name == sweep["chosen_on_dev"] else ""
            rows.append(
                f"| {number}: {name} | {changed} | {variant['steps']} | {variant['fit_seconds']} | "
                f"{variant['dev']['min']:.1f} | {variant['dev']['average']:.2f} | "
                f"{variant['flores']['min']:.1f} | {variant['flores']['average']:.2f} | {chosen} |"
            )
    return (
        "\n".join(
            [
                "## Teacher-space adapter settings, chosen on dev",
                "",
                "The adapter (`train.teacher_adapter`) fitted with other settings on the student of "
                f"{' and '.join(students)} and the same {sweeps[0]['fit_pairs']} training pairs "
                f"(teacher {sweeps[0]['teacher']}). Retrieval between the "
                "teacher's English vector and the adapter's map of the student's translation, both directions: "
                "dev = 200 held-out pairs a language (worst language and direction first, then the average; what "
                "chooses), FLORES devtest beside it (reports only). A point of dev worst is one of 200 sentences.",
                "",
                "| sweep: variant | changed (train.teacher_adapter) | optimiser steps | fit s | dev worst "
                "| dev average | FLORES worst | FLORES average | on dev |",
                "|---|---|---:|---:|---:|---:|---:|---:|---|",
                *rows,
                "",
                *(
                    f"Sweep {number}: `{sweep['command']}` ({sweep['seconds'] / 60:.0f} min)."
                    for number, sweep in enumerate(sweeps, 1)
                ),
                "",
            ]
        )
        + "\n"
    )
