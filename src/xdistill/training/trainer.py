"""The ``train`` stage function: :func:`train_student` distills one student, the run read top to bottom.

One optimiser step sees ``batch_size`` parallel pairs (split into ``grad_accumulation``
micro-batches, and each micro-batch split over the processes of a ``torchrun`` job). Source and
translation of a micro-batch go through the student in one forward pass; the teacher side comes
from the precomputed :class:`~xdistill.teacher.store.TeacherStore`.

The run: set-up (:mod:`~xdistill.training.setup`: data, teacher vectors, the student, tokenised once), the
loop (:mod:`~xdistill.training.loop`: the student's head is fitted to the teacher's space
(:mod:`~xdistill.training.alignment`), then AdamW with linear warm-up and decay, gradient clipping, bf16
or fp16 autocast as ``train.precision`` asks, periodic validation on
development data (:mod:`~xdistill.training.validation`) with best-checkpoint selection, early stopping and a
collapse guard, atomic checkpoints for exact resume, progress logging), then the export
(:mod:`~xdistill.training.finish`: the weight-space interpolation between the starting and the best student
that validates best (:mod:`~xdistill.training.interpolation`) is exported, with the training curves (CSV,
JSON metrics, PNG)).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xdistill.errors import XdistillError
from xdistill.models.vocabulary import DEFAULT_RAW_DIR
from xdistill.training.distributed import DistContext
from xdistill.training.finish import finish
from xdistill.training.loop import LoopOutcome, optimise
from xdistill.training.provenance import describe_run, peak_memory_mb
from xdistill.training.settings import OutputPaths, RuntimeSettings, TrainParams
from xdistill.training.setup import TrainingRun, TrainInputs, prepare


@dataclass
class TrainResult:
    """What :func:`train_student` produced."""

    output_dir: Path
    steps_completed: int
    best_step: int
    stopped_early: bool
    resumed_from_step: int | None
    start: dict[str, float]  # dev scores of the start (the student as training started)
    best: dict[str, float]
    last: dict[str, float]
    pairs_per_second: float
    history: list[dict[str, Any]]
    interpolation: dict[str, Any] | None = None
    train_seconds: float = 0.0  # inside the steps (pairs_per_second's denominator)
    frozen_cache: dict[str, float] | None = None  # train.student.cache_frozen: the states' size and the pass's time


def train_student(
    train_file: str | Path,
    dev_file: str | Path,
    teacher_dir: str | Path,
    student_spec: str,
    params: TrainParams | dict[str, Any],
    outputs: OutputPaths | None = None,
    *,
    teacher_spec: str | None = None,
    teacher_precision: str = "fp32",
    device: str | None = None,
    dev_sts_dir: str | Path | None = None,
    runtime: RuntimeSettings | None = None,
    dev_mining_file: str | Path | None = None,
    raw_dir: str | Path | None = DEFAULT_RAW_DIR,
) -> TrainResult:
    """Distill ``student_spec`` towards the teacher vectors in ``teacher_dir``; the ``train`` stage.

    Reads the parallel ``train_file``/``dev_file`` (gzipped TSV with a ``source, translation,
    lang, corpus`` header) and, when given, the stsb-multi-mt folder ``dev_sts_dir`` (its dev
    split only) and the dev mining blocks ``dev_mining_file`` (``raw_dir``: the staged evaluation sets a
    ``vocabulary: corpus`` student keeps the pieces of, with the train and dev pairs'); writes the student chosen
    on dev data (best checkpoint by ``params.selection_metric``, then the best ``params.interpolation`` weight) to
    ``outputs.model_dir`` as a sentence-transformers folder, plus metrics JSON, history CSV and
    the curves PNG. Resumes automatically from ``outputs.checkpoint_dir/last.pt`` when it was
    written by a run with the same settings and data. Under ``torchrun`` it trains with DDP
    (only rank 0 writes). Raises :class:`XdistillError` on bad input, a collapsed or a diverged student.
    """
    params = params if isinstance(params, TrainParams) else TrainParams.from_params(params)
    outputs = outputs or OutputPaths()
    runtime = runtime or RuntimeSettings()
    inputs = TrainInputs(
        train_file=Path(train_file),
        dev_file=Path(dev_file),
        teacher_dir=Path(teacher_dir),
        student_spec=student_spec,
        teacher_spec=teacher_spec,
        teacher_precision=teacher_precision,
        dev_sts_dir=dev_sts_dir,
        dev_mining_file=dev_mining_file,
        raw_dir=raw_dir,
    )
    ctx = DistContext.from_env(placement(params.device, device))
    try:
        run = prepare(inputs, params, outputs, runtime, ctx)
        outcome = optimise(run)
        provenance = describe_run(ctx, params.precision, ctx.gather_objects(peak_memory_mb(ctx.device)))
        interpolation = finish(run, outcome, provenance)
        return _result(run, outcome, interpolation)
    finally:
        ctx.close()


def placement(device_type: str, device: str | None) -> str:
    """The device this process trains on: ``device`` (e.g. ``cuda:1``) when given, else ``train.device``; a
    device of another type than ``train.device`` is refused (its numbers would be another run's)."""
    if device is None:
        return device_type
    if device.split(":")[0] != device_type:
        raise XdistillError(
            f"--device {device} is not a {device_type} device (params train.device); set train.device to "
            f"{device.split(':')[0]} instead: the device type changes the numbers, so it is a param"
        )
    return device


def _result(run: TrainingRun, outcome: LoopOutcome, interpolation: dict[str, Any] | None) -> TrainResult:
    """What the run produced, for the caller (the files are written by then)."""
    state = outcome.state
    return TrainResult(
        output_dir=run.outputs.model_dir,
        steps_completed=state.step,
        best_step=state.best_step,
        stopped_early=state.stopped_early,
        resumed_from_step=outcome.resumed_from,
        start=state.start_metrics,
        best=state.best_metrics,
        last=state.last_metrics,
        pairs_per_second=state.pairs_seen / max(state.train_seconds, 1e-9),
        history=state.history,
        interpolation=interpolation,
        train_seconds=state.train_seconds,
        frozen_cache=run.frozen_cache_report(),
    )
