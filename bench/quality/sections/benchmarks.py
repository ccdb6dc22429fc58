"""One RESULTS.md table per benchmark (STS17, STSb, language bias, Tatoeba, mining, dev), published columns beside."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.quality.columns import column_names, fill
from bench.quality.published import PUBLISHED
from xdistill.evaluation.report import markdown_table
from xdistill.evaluation.sts import STS17_TRACKS

# Rows that have a natural order (else: as the metrics files list them).
ROW_ORDER = {"sts17": list(STS17_TRACKS), "language_bias": ["expected", "actual", "difference"]}


BENCHMARK_SECTIONS = [
    ("sts17", "STS17 (SemEval-2017 official tracks), Spearman x 100"),
    (
        "sts_crosslingual",
        "Cross-lingual STSb (stsb-multi-mt test, English s1 + translated s2 and the reverse), Spearman x 100",
    ),
    ("sts_monolingual", "Monolingual STSb per language (stsb-multi-mt test), Spearman x 100"),
    ("language_bias", "Language bias (Reimers & Gurevych Table 8 construction), Spearman x 100"),
    ("tatoeba", "Tatoeba similarity search (LASER test set), accuracy % (average of both directions)"),
    ("mining_flores", "Bitext mining, FLORES-200 BUCC-style benchmark (margin ratio, k=4, max retrieval), F1 %"),
    ("dev", "Held-out dev pairs: translation accuracy % and MSE to the teacher (x 100)"),
]


def merged_columns(members: list[tuple[dict[str, Any], dict[str, Any]]], benchmark: str) -> dict[str, dict[str, Any]]:
    """``{column: {row: value}}`` over every member: baselines once, each student once."""
    columns: dict[str, dict[str, Any]] = {}
    for spec, data in members:
        per_label = data["eval"].get(benchmark) or {}
        names = column_names(spec.get("label", spec["name"]), data["params"])
        for label in ("teacher", "student-untrained", "student-start", "muse", "student"):
            if label in per_label:
                fill(columns.setdefault(names[label], {}), per_label[label])
    return columns


def ordered_rows(columns: Mapping[str, Mapping[str, Any]], benchmark: str) -> list[str]:
    """Rows in the benchmark's own order (STS17: the official track order), averages last."""
    rows = list(dict.fromkeys(row for values in columns.values() for row in values))
    first = ROW_ORDER.get(benchmark, [])
    rows = [r for r in first if r in rows] + [r for r in rows if r not in first]
    return [r for r in rows if not r.startswith("average")] + [r for r in rows if r.startswith("average")]


def benchmark_section(members: list[tuple[dict[str, Any], dict[str, Any]]], benchmark: str, title: str) -> str:
    columns = merged_columns(members, benchmark)
    if not columns:
        return ""
    published = PUBLISHED.get(benchmark, {})
    for name, values in published.get("columns", {}).items():
        columns[name] = dict(values)
    text = f"## {title}\n\n{markdown_table(ordered_rows(columns, benchmark), columns)}"
    if published.get("note"):
        text += f"\n{published['note']}\n"
    return text + "\n"
