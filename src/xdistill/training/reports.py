"""The training run's reports: the metrics JSON, the history CSV and the curves PNG."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from xdistill.io import atomic_path, write_json_atomic


def chosen_metrics(state: Any, interpolation: dict[str, Any] | None) -> dict[str, float]:
    """The dev metrics of the student the run exports (before any rotation): the interpolation chosen on dev
    data, else the best checkpoint, else the last step."""
    return interpolation["selected"] if interpolation else state.best_metrics or state.last_metrics


def write_reports(
    state: Any,
    params: Any,
    outputs: Any,
    resumed_from: int | None,
    interpolation: dict[str, Any] | None,
    rotation: dict[str, Any] | None = None,
    teacher_adapter: dict[str, Any] | None = None,
    frozen_cache: dict[str, Any] | None = None,
    provenance: dict[str, Any] | None = None,
) -> None:
    """``outputs.metrics`` (summary JSON), ``outputs.history_csv`` and ``outputs.plot`` of a finished run."""
    chosen = chosen_metrics(state, interpolation)
    summary = {
        "steps": state.step,
        "best_step": state.best_step,
        "stopped_early": state.stopped_early,
        "resumed_from_step": resumed_from,
        "selection_metric": params.selection_metric,
        "pairs_per_second": round(state.pairs_seen / max(state.train_seconds, 1e-9), 3),
        "train_seconds": round(state.train_seconds, 2),
        "start": state.start_metrics,
        "best": state.best_metrics,
        "last": state.last_metrics,
        # the exported student: the best checkpoint, or the interpolation chosen on dev data, measured again
        # after the rotation onto the teacher's space where train.export_rotation is on
        "exported": (rotation or {}).get("measured", chosen),
        "interpolation": interpolation,
        "export_rotation": {k: v for k, v in rotation.items() if k != "measured"} if rotation else None,
        # the student's second, teacher-space output (train.teacher_adapter): its fit and dev accuracy
        "teacher_adapter": teacher_adapter,
        # train.student.cache_frozen: the frozen layers' states the steps ran from (size, the pass's seconds)
        "frozen_cache": frozen_cache,
        # the device, processes, precision and library versions (xdistill.training.provenance)
        "provenance": provenance,
    }
    if outputs.metrics is not None:
        write_json_atomic(outputs.metrics, summary)
    if outputs.history_csv is not None:
        write_history_csv(state.history, outputs.history_csv)
    if outputs.plot is not None:
        from xdistill.training.curves import plot_training_curves

        plot_training_curves(
            state.history, outputs.plot, state.best_step, summary["exported"], _exported_label(interpolation)
        )


def _exported_label(interpolation: dict[str, Any] | None) -> str:
    if interpolation is None:
        return "exported student (the best checkpoint)"
    return f"exported student (WiSE-FT a={interpolation['alpha']:g})"


def write_history_csv(history: list[dict[str, Any]], path: Path) -> None:
    """One row per log/eval event; columns are the union of every event's keys."""
    columns: list[str] = []
    for row in history:
        columns.extend(k for k in row if k not in columns)
    with atomic_path(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(history)
