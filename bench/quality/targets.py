"""The targets RESULTS.md checks: each member's against its evaluation, the light students' size and kept quality."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.quality.columns import SUMMARY_ROWS

LIGHT_QUALITY = [("sts17_average", "STS17"), ("tatoeba_average", "Tatoeba")]


LIGHT_KEEP_TARGET = 97.0  # % of the full student's STS17 and Tatoeba averages


LIGHT_MAX_PARAMETERS, LIGHT_MAX_MB = 50e6, 100.0


def light_targets(facts: Mapping[str, Any], kept: list[float | None], others: list[Mapping[str, Any]]) -> str:
    """'met', or the light-student targets a row misses: size, the quality it keeps, and (a low-dimensional
    head) being faster than the full-dimensional light rows of its size."""
    missed = []
    if (facts.get("parameters") or 0) > LIGHT_MAX_PARAMETERS:
        missed.append(f"parameters > {LIGHT_MAX_PARAMETERS / 1e6:.0f}M")
    if (facts.get("size_mb") or 0) > LIGHT_MAX_MB:
        missed.append(f"size > {LIGHT_MAX_MB:.0f} MB")
    for value, (_, title) in zip(kept, LIGHT_QUALITY):
        if value is None or value < LIGHT_KEEP_TARGET:
            missed.append(f"{title} kept < {LIGHT_KEEP_TARGET:.0f} %")
    dim, speed, parameters = facts.get("dimension"), facts.get("sentences_per_second"), facts.get("parameters") or 0
    if dim and speed and dim < 384:
        wide = [
            o["sentences_per_second"]
            for o in others
            if o.get("dimension") == 384
            and o.get("sentences_per_second")
            and abs((o.get("parameters") or 0) - parameters) <= 0.05 * parameters
        ]
        if wide and speed <= max(wide):
            missed.append(f"not faster than the 384-d rows ({speed:.0f} vs {max(wide):.0f} sentences/s)")
    return "met" if not missed else "missed: " + "; ".join(missed)


def targets_section(members: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    """The quality targets for each member, checked against its evaluation (computed, never typed)."""
    lines = [
        "## Targets",
        "",
        "Checked by the report script against each member's evaluation (tolerance 0.5 point "
        "where the target says 'at or above').",
        "",
    ]
    for spec, data in members:
        summary = data["eval"].get("summary") or {}
        models = summary.get("models", {})
        student, base, teacher = (models.get(k, {}) for k in ("student", "student-untrained", "teacher"))
        sts17 = data["eval"].get("sts17") or {}
        tatoeba = data["eval"].get("tatoeba") or {}
        checks = []
        for key, title in SUMMARY_ROWS:
            if key in ("task_sts",) or key.startswith("teacher_space") or key == "sts17_track4b":
                continue
            if student.get(key) is None or base.get(key) is None:
                continue
            better_low = key == "language_bias_difference"
            ok = abs(student[key]) <= abs(base[key]) + 0.5 if better_low else student[key] >= base[key] - 0.5
            checks.append((f"{title}: {student[key]:.1f} vs untrained {base[key]:.1f}", ok))
        codes = [c for c in (tatoeba.get("student") or {}) if not c.startswith("average")]
        for code in codes:
            mine, theirs = tatoeba["student"][code], (tatoeba.get("student-untrained") or {}).get(code)
            if theirs is not None:
                checks.append((f"Tatoeba {code}: {mine:.1f} vs untrained {theirs:.1f}", mine >= theirs - 0.5))
        if student.get("sts17_average") is not None:
            checks.append(
                (f"STS17 six-track average {student['sts17_average']:.1f} >= 80", student["sts17_average"] >= 80)
            )
        en, teacher_en = (sts17.get("student") or {}).get("en-en"), (sts17.get("teacher") or {}).get("en-en")
        if en is not None and teacher_en is not None:
            checks.append((f"STS17 en-en {en:.1f} >= teacher {teacher_en:.1f} - 1", en >= teacher_en - 1))
        worst = student.get("teacher_space_flores_min")
        if worst is not None:
            checks.append(
                (f"teacher-space FLORES retrieval, worst language and direction {worst:.1f} >= 90", worst >= 90)
            )
        worst = student.get("teacher_space_adapter_flores_min")
        if worst is not None:
            checks.append(
                (
                    f"teacher-space FLORES retrieval through the student's adapter (--teacher-space), worst "
                    f"language and direction {worst:.1f} >= 90",
                    worst >= 90,
                )
            )
        met = sum(ok for _, ok in checks)
        lines.append(f"**{spec.get('label', spec['name'])}**: {met} of {len(checks)} targets met.")
        lines.append("")
        lines += [f"- {'met' if ok else 'MISSED'}: {text}" for text, ok in checks]
        lines.append("")
    return "\n".join(lines) + "\n"
