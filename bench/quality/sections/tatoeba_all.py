"""RESULTS.md's Tatoeba table over every language of the LASER test set, its plot, and LEALLA's published averages."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.quality.columns import column_names, mean
from bench.quality.published import PUBLISHED_TATOEBA_ALL
from bench.quality.results import TATOEBA_ALL
from xdistill.evaluation.report import markdown_table
from xdistill.evaluation.tatoeba import tatoeba_code


def tatoeba_all_section(
    members: list[tuple[dict[str, Any], dict[str, Any]]],
    tatoeba_all: Mapping[str, Any],
    results: Path,
    output_dir: Path,
) -> str:
    """The 112-language Tatoeba table (``python -m bench.quality tatoeba-all``), beside LEALLA's published averages."""
    keys = [spec["name"] for spec, _ in members] + ["student-untrained", "muse"]  # the columns' order
    # students scored before they left bench/quality/quality.yaml: their evidence stays, labelled as such
    earlier = [key for key in tatoeba_all if key not in keys]
    scored = {key: tatoeba_all[key] for key in keys + earlier if key in tatoeba_all}
    if not scored:
        return ""
    data0 = members[0][1]
    names = {
        **column_names("", data0["params"]),
        **{spec["name"]: spec.get("label", spec["name"]) for spec, _ in members},
        **{key: f"`{key}` (an earlier member, no longer in bench/quality/quality.yaml)" for key in earlier},
    }
    unscored = [spec["name"] for spec, _ in members if spec["name"] not in tatoeba_all]
    trained = {tatoeba_code(lang) for lang in data0["params"]["languages"]}
    count = max(len(r["scores"]) for r in scored.values())
    rows = [f"average, all {count} languages", "average, the training languages", "average, the other languages"]
    columns: dict[str, dict[str, Any]] = {}
    for key in scored:
        per_language = {code: r["average"] for code, r in scored[key]["scores"].items()}
        inside = [v for c, v in per_language.items() if c in trained]
        outside = [v for c, v in per_language.items() if c not in trained]
        columns[names[key]] = {
            rows[0]: mean(list(per_language.values())),
            rows[1]: mean(inside),
            rows[2]: mean(outside),
        }
    for name, value in PUBLISHED_TATOEBA_ALL.items():
        columns[name] = {"average, all 112 languages": value}
    plot = tatoeba_all_plot(scored, names, results / f"{TATOEBA_ALL}.png")
    students = {s["name"] for s, _ in members} | set(earlier)
    shift = _other_languages_shift(
        columns, [names[key] for key in scored if key in students], names["student-untrained"], rows
    )
    if unscored:
        shift += (
            f" Not scored on every language yet: {', '.join(f'`{name}`' for name in unscored)} "
            "(`python -m bench.quality tatoeba-all`)."
        )
    commands = "; ".join(f"`{c}`" for c in sorted({r["command"] for r in scored.values()}))
    limits = {r.get("max_pairs") for r in scored.values()}
    pairs = "every pair" if limits == {None} else f"at most {max(n for n in limits if n)} pairs"
    minutes = ", ".join(f"{names.get(k, k)} {r['seconds'] / 60:.0f} min" for k, r in scored.items())
    return (
        f"## Tatoeba, all languages of the LASER test set, accuracy % (average of both directions)\n\n"
        f"{markdown_table(rows, columns)}\n"
        f"Command: {commands} ({pairs} of each language; {minutes} on the 2-core CPU). Training languages: "
        f"{', '.join(sorted(trained))} (their Tatoeba test sentences are removed from the training data by "
        "decontamination). Published columns: TF Hub model cards of LEALLA (Mao & Nakagawa 2023), the same "
        f"test set and metric over its 112 languages.{shift}\n\n"
        f"![Tatoeba accuracy per language]({os.path.relpath(plot, output_dir)})\n\n"
    )


def _other_languages_shift(
    columns: Mapping[str, Mapping[str, Any]], students: list[str], untrained: str, rows: list[str]
) -> str:
    """A sentence on how distillation moved the languages it did not train on (computed, not typed)."""
    if untrained not in columns or not students:
        return ""
    trained_shift = [
        columns[s][rows[1]] - columns[untrained][rows[1]]
        for s in students
        if columns[s][rows[1]] is not None and columns[untrained][rows[1]] is not None
    ]
    other_shift = [
        columns[s][rows[2]] - columns[untrained][rows[2]]
        for s in students
        if columns[s][rows[2]] is not None and columns[untrained][rows[2]] is not None
    ]
    if not trained_shift or not other_shift:
        return ""
    trained_mean, other_mean = mean(trained_shift), mean(other_shift)
    if other_mean >= trained_mean:
        worse = "the languages outside training fare no worse"
    elif other_mean < 0:
        worse = "the languages outside training move down" + (" more" if trained_mean < 0 else "")
    else:
        worse = "the languages outside training gain less"
    return (
        f" Against the untrained student, the distilled students move {min(trained_shift):+.1f} to "
        f"{max(trained_shift):+.1f} points on the training languages and {min(other_shift):+.1f} to "
        f"{max(other_shift):+.1f} on the languages they never saw: {worse}."
    )


def tatoeba_all_plot(scored: Mapping[str, Mapping[str, Any]], names: Mapping[str, str], path: Path) -> Path:
    """Per-language accuracy of every scored model, languages ranked by the first model's score."""
    from xdistill.evaluation.plots import ranked_lines

    codes = sorted({code for result in scored.values() for code in result["scores"]})
    series = {
        names.get(key, key): [result["scores"].get(code, {}).get("average") for code in codes]
        for key, result in scored.items()
    }
    return ranked_lines(
        codes, series, "Tatoeba (LASER test set), accuracy per language", "accuracy % (both directions)", path
    )
