"""The export after the loop: which student leaves the run, and what is written with it: :func:`finish`.

The best checkpoint on dev data, then the weight-space interpolation between the starting and the best
student that validates best (WiSE-FT, :mod:`~xdistill.training.interpolation`), optionally rotated onto
the teacher's space; saved as a sentence-transformers folder with its teacher-space adapter, the starting
student next to it, and the run's reports (metrics JSON, history CSV, curves PNG). Only rank 0 writes.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from xdistill.errors import XdistillError
from xdistill.export.model_card import training_facts, write_model_card
from xdistill.training import checkpoint as ckpt
from xdistill.training.loop import START_CHECKPOINT, LoopOutcome, LoopState
from xdistill.training.reports import chosen_metrics, write_reports
from xdistill.training.setup import TrainingRun
from xdistill.training.student import load_trainable_state_dict, save_student, trainable_state_dict
from xdistill.training.validation import is_better

logger = logging.getLogger(__name__)


def finish(run: TrainingRun, outcome: LoopOutcome, provenance: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Export the student chosen on dev data to ``outputs.model_dir`` with its reports (``provenance``: where
    and how the run ran); the interpolation report (None when ``train.interpolation`` is off, and on every
    rank but 0)."""
    params, outputs, ctx, state = run.params, run.outputs, run.ctx, outcome.state
    interpolation: dict[str, Any] | None = None
    if ctx.is_main:
        _load_best(run, state)
        if params.interpolation:
            interpolation = _interpolate(run, state)
        before = chosen_metrics(state, interpolation)
        rotation, sample_embeddings = _rotate_to_teacher(run, before) if params.export_rotation else (None, None)
        save_student(run.student, outputs.model_dir)
        adapter = _fit_teacher_adapter(run, outputs.model_dir, sample_embeddings)
        write_model_card(outputs.model_dir, training_facts(run, state))  # replaces sentence-transformers' template
        if outputs.start_dir is not None:
            _save_start(run, outputs.start_dir)
        write_reports(
            state,
            params,
            outputs,
            outcome.resumed_from,
            interpolation,
            rotation,
            adapter,
            run.frozen_cache_report(),
            provenance,
        )
    ctx.barrier()
    return interpolation


def _load_best(run: TrainingRun, state: LoopState) -> None:
    """Leave the student at the best checkpoint on dev data (as it is when no evaluation improved)."""
    checkpoint_dir = run.outputs.checkpoint_dir
    best = ckpt.load_checkpoint(checkpoint_dir, ckpt.BEST, run.fingerprint)
    if best is not None:
        load_trainable_state_dict(run.student, best["model"])
    elif state.best_metrics:  # exporting the last step instead would contradict every report of best_step
        raise XdistillError(
            f"{checkpoint_dir / ckpt.BEST} (step {state.best_step}, the best on dev data) "
            "is missing or unreadable: delete the checkpoint folder to train again"
        )


def _rotate_to_teacher(
    run: TrainingRun, before: dict[str, float]
) -> tuple[dict[str, Any], tuple[int, torch.Tensor] | None]:
    """Rotate the chosen student onto the teacher's space and measure it again on dev data (from its metrics
    ``before``, when there are any), for the report; also the rotated student's embeddings of its fit sample,
    keyed by the sample's size (None when skipped).

    A student that cannot share the teacher's space (a low-dimensional head) is exported as it is,
    the reason logged and reported: the option is on by default, and such a head is a deliberate choice.
    """
    from xdistill.training.alignment import rotate_output_to_teacher, rotation_unavailable

    reason = rotation_unavailable(run.student, run.train.teacher.shape[1])
    if reason is not None:
        logger.warning("train.export_rotation skipped: %s", reason)
        return {"skipped": reason}, None
    fit, embeddings = rotate_output_to_teacher(
        run.student, run.featurize, run.train, run.params.align_pairs, run.params.eval_batch_size
    )
    logger.info(
        "rotated the exported student onto the teacher's space (%d pairs): mse %.6f -> %.6f",
        fit["pairs"],
        fit["mse_before"],
        fit["mse_after"],
    )
    measured = run.measure_rotated(before) if before else run.measure()
    return {**fit, "measured": measured}, (run.params.align_pairs, embeddings)


def _fit_teacher_adapter(
    run: TrainingRun, folder: Path, sample_embeddings: tuple[int, torch.Tensor] | None = None
) -> dict[str, Any] | None:
    """Fit the teacher-space adapter (``train.teacher_adapter``) of the exported student and save it into its
    folder ``folder``; its report (None when off). The student's own output is left as it is; the adapter is
    its second output for users of an index built by the teacher (:mod:`xdistill.adapter.model`).
    The same adapter on the student as training started is the ``start_adapter`` stage's
    (:mod:`xdistill.adapter.start`), run-cached for every recipe that shares that start.
    """
    from xdistill.adapter.fit import AdapterSettings, fit_and_save_adapter

    settings = AdapterSettings.from_params(run.params.teacher_adapter)
    if not settings.enabled:
        return None
    report = fit_and_save_adapter(
        run.student,
        run.featurize,
        run.train,
        run.validation.pairs,
        settings,
        run.teacher_spec,
        run.params.eval_batch_size,
        folder,
        sample_embeddings,
    )
    logger.info(
        "teacher-space adapter of %s fitted on %d pairs: dev teacher-space accuracy %.2f",
        folder,
        report["pairs"],
        report["dev_teacher_accuracy"],
    )
    return report


def _interpolate(run: TrainingRun, state: LoopState) -> dict[str, Any]:
    """Leave the student at the interpolation weight that validates best; what was measured, for the report."""
    from xdistill.training.interpolation import choose_interpolation

    params = run.params
    alphas = params.interpolation
    assert alphas is not None  # finish interpolates only when train.interpolation is set
    start = ckpt.load_checkpoint(run.outputs.checkpoint_dir, START_CHECKPOINT, run.fingerprint)
    if start is None:
        raise XdistillError(
            f"{run.outputs.checkpoint_dir / START_CHECKPOINT} is missing: cannot interpolate "
            "(delete the checkpoint folder to train from the start)"
        )
    end = trainable_state_dict(run.student)
    origin = start["model"]
    known = {0.0: state.start_metrics}
    if params.interpolation_from == "untrained":
        from xdistill.training.alignment import mean_pooled_norm
        from xdistill.training.interpolation import with_identity_head

        load_trainable_state_dict(run.student, origin)  # the encoder as it started: its pooled norms
        scale = 1.0 / mean_pooled_norm(run.student, run.featurize, run.train, params.eval_batch_size)
        origin, known = with_identity_head(run.student, origin, scale), {}
    if state.best_metrics:
        known[1.0] = state.best_metrics
    metric = params.selection_metric
    alpha, results = choose_interpolation(
        run.student,
        origin,
        end,
        alphas,
        run.measure,
        lambda value, best: is_better(metric, value, best),
        metric,
        known,
        params.interpolation_tolerance,
    )
    for a, metrics in results.items():
        logger.info("interpolation a=%.2f: %s %.3f", a, metric, metrics[metric])
    logger.info(
        "exporting the interpolation a=%.2f of the %s and the best student",
        alpha,
        "untrained student" if params.interpolation_from == "untrained" else "starting student",
    )
    return {
        "alpha": alpha,
        "metric": metric,
        "from": params.interpolation_from,
        "tolerance": params.interpolation_tolerance,
        "selected": results[alpha],
        "by_alpha": {f"{a:g}": m for a, m in results.items()},
    }


def _save_start(run: TrainingRun, start_dir: Path) -> None:
    """Write the student as training started (loads the start checkpoint: call after the export)."""
    start = ckpt.load_checkpoint(run.outputs.checkpoint_dir, START_CHECKPOINT, run.fingerprint)
    if start is None:
        raise XdistillError(
            f"{run.outputs.checkpoint_dir / START_CHECKPOINT} is missing: cannot write the starting student"
        )
    load_trainable_state_dict(run.student, start["model"])
    save_student(run.student, start_dir)
