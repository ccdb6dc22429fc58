"""RESULTS.md's summary table and each student against the untrained student (from the summary metrics)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.quality.columns import SUMMARY_ROWS, column_names, fill
from xdistill.evaluation.report import markdown_table


def summary_table(members: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    columns: dict[str, dict[str, Any]] = {}
    for spec, data in members:
        models = (data["eval"].get("summary") or {}).get("models", {})
        names = column_names(f"`{spec['name']}`", data["params"])
        for label in ("teacher", "student-untrained", "student-start", "muse", "student"):
            if label in models:
                fill(
                    columns.setdefault(names[label], {}), {title: models[label].get(key) for key, title in SUMMARY_ROWS}
                )
    # a row no member measured (e.g. the adapter's, before a member had one) would be all '-'
    rows = [title for _, title in SUMMARY_ROWS if any(values.get(title) is not None for values in columns.values())]
    legend = "\n".join(f"- `{spec['name']}`: {spec.get('label', spec['name'])}" for spec, _ in members)
    return (
        markdown_table(rows, columns)
        + f"\nThe students:\n\n{legend}\n\n"
        + "Baseline columns: each cell from the first member that measured it. The no-training column is "
        "that member's own start (its head fit on its own sample), so it moves slightly from member to member "
        "(each member's own: `bench/results/quality/<member>/metrics/eval/summary.json`, `student-start`).\n"
    )


DELTA_KEYS = [
    ("sts17_crosslingual_average", "STS17 cross-lingual"),
    ("sts17_monolingual_average", "STS17 monolingual"),
    ("sts_crosslingual_average", "STSb cross-lingual"),
    ("tatoeba_average", "Tatoeba (training languages)"),
    ("mining_flores_f1", "mining F1"),
    ("primary_score", "primary score"),
]


def deltas_section(members: list[tuple[dict[str, Any], dict[str, Any]]], tatoeba_all: Mapping[str, Any]) -> str:
    """Each student against the untrained student, computed from the summary metrics (and tatoeba-all)."""
    lines = [
        "## Each student against the untrained student",
        "",
        "Differences in points (student minus untrained mE5-small), from the summary metrics above; "
        "the language bias is shown as untrained -> student (0 = no bias).",
        "",
    ]
    for spec, data in members:
        models = (data["eval"].get("summary") or {}).get("models", {})
        student, base = models.get("student"), models.get("student-untrained")
        if not student or not base:
            continue
        parts = [
            f"{title} {student[key] - base[key]:+.1f}"
            for key, title in DELTA_KEYS
            if student.get(key) is not None and base.get(key) is not None
        ]
        if spec["name"] in tatoeba_all and "student-untrained" in tatoeba_all:
            difference = tatoeba_all[spec["name"]]["average"] - tatoeba_all["student-untrained"]["average"]
            parts.append(f"Tatoeba all languages {difference:+.1f}")
        bias = f"language bias {base['language_bias_difference']:.1f} -> {student['language_bias_difference']:.1f}"
        lines.append(f"- **{spec.get('label', spec['name'])}**: {', '.join(parts)}, {bias}.")
    return "\n".join(lines) + "\n\n"
