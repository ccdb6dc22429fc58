"""The distillation training loop and the ``train`` stage function.

One optimiser step sees ``batch_size`` parallel pairs (split into ``grad_accumulation``
micro-batches, and each micro-batch split over the processes of a ``torchrun`` job). Source and
translation of a micro-batch go through the student in one forward pass; the teacher side comes
from the precomputed :class:`~xdistill.training.teacher_store.TeacherStore`.

The run: the student's head is fitted to the teacher's space (:mod:`~xdistill.training.alignment`),
then AdamW with linear warm-up and decay, gradient clipping, bf16 autocast on GPU (and on CPU with
``train.autocast_bf16: auto`` or ``always``), periodic validation on development data
(:mod:`~xdistill.training.validation`) with best-checkpoint selection, early stopping and a collapse
guard, atomic checkpoints for exact resume, progress logging; at the end the weight-space
interpolation between the starting and the best student that validates best
(:mod:`~xdistill.training.interpolation`) is exported, with the training curves (CSV, JSON metrics,
PNG).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from xdistill.errors import XdistillError
from xdistill.models.vocabulary import DEFAULT_RAW_DIR, vocabulary_digest
from xdistill.training import checkpoint as ckpt
from xdistill.training.batches import (Featurizer, TokenizedPairs, autocast_context, cpu_has_native_bf16,
                                       tokenize_pairs, uses_bf16_autocast)
from xdistill.training.distributed import DistContext
from xdistill.training.pairs import BatchStream, read_parallel_pairs
from xdistill.training.reports import write_reports
from xdistill.training.settings import OutputPaths, RuntimeSettings, TrainParams
from xdistill.training.student import (
    StudentConfig,
    build_student,
    load_trainable_state_dict,
    save_student,
    trainable_state_dict,
)
from xdistill.training.validation import (
    DevScoreWeights,
    ValidationData,
    check_collapse,
    is_better,
    load_mining_blocks,
    load_sts_dev,
    sts_dev_digests,
    validate,
)

logger = logging.getLogger(__name__)

INITIAL = "initial.pt"  # the student as training started (after head alignment): interpolation's start


class TrainingDivergedError(XdistillError):
    """A training step's gradients were not finite (NaN or inf): raised before the optimizer applies them."""

    def __init__(self, step: int, grad_norm: float, loss: float) -> None:
        super().__init__(
            f"training diverged at step {step}: the gradient norm is {grad_norm} (loss {loss}). The weights "
            "were not updated and the last checkpoint is intact; lower train.learning_rate or turn off "
            "train.autocast_bf16"
        )
        self.step, self.grad_norm, self.loss = step, grad_norm, loss


@dataclass
class TrainResult:
    """What :func:`train_student` produced."""

    output_dir: Path
    steps_completed: int
    best_step: int
    stopped_early: bool
    resumed_from_step: int | None
    initial: dict[str, float]
    best: dict[str, float]
    last: dict[str, float]
    pairs_per_second: float
    history: list[dict[str, Any]]
    interpolation: dict[str, Any] | None = None
    train_seconds: float = 0.0  # inside the steps (pairs_per_second's denominator)
    frozen_cache: dict[str, float] | None = None  # train.student.cache_frozen: the states' size and the pass's time


class DistillationModule(nn.Module):
    """Student + objective as one module, so DDP syncs the projection's gradients too."""

    def __init__(self, student: nn.Module, objective: nn.Module, cached_layers: int = 0) -> None:
        super().__init__()
        self.student = student
        self.objective = objective
        self.cached_layers = cached_layers  # > 0: features carry the states after this many frozen layers

    def forward(self, features: dict[str, torch.Tensor], teacher_src: torch.Tensor):
        if self.cached_layers:
            from xdistill.training.frozen_cache import embed_from_states

            embeddings = embed_from_states(self.student, features, self.cached_layers).float()
        else:
            embeddings = self.student(features)["sentence_embedding"].float()
        n = teacher_src.shape[0]
        return self.objective(embeddings[:n], embeddings[n:], teacher_src)


# ----------------------------------------------------------------------------------------------
# Building blocks
# ----------------------------------------------------------------------------------------------


def build_objective(loss: dict[str, Any], student_dim: int, teacher_dim: int) -> nn.Module:
    """The configured :class:`DistillationObjective` (weights and hyper-parameters from ``train.loss``)."""
    from xdistill.training.losses import DistillationObjective

    return DistillationObjective(loss, student_dim=student_dim, teacher_dim=teacher_dim)


def make_optimizer(module: nn.Module, params: TrainParams) -> torch.optim.AdamW:
    """AdamW over trainable weights; biases and LayerNorm weights get no weight decay."""
    decay, no_decay = [], []
    for name, parameter in module.named_parameters():
        if not parameter.requires_grad:
            continue
        (no_decay if parameter.ndim < 2 or "LayerNorm" in name or "norm" in name.lower() else decay).append(parameter)
    groups = [
        {"params": decay, "weight_decay": params.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=params.learning_rate)


def linear_schedule(optimizer: torch.optim.Optimizer, total_steps: int, warmup_ratio: float):
    """Linear warm-up over ``warmup_ratio`` of the steps, then linear decay to 0 (transformers' schedule)."""
    from transformers import get_linear_schedule_with_warmup

    return get_linear_schedule_with_warmup(optimizer, int(round(total_steps * warmup_ratio)), total_steps)


# ----------------------------------------------------------------------------------------------
# The stage
# ----------------------------------------------------------------------------------------------


@dataclass
class _LoopState:
    step: int = 0
    position: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    best_value: float | None = None
    best_step: int = 0
    best_metrics: dict[str, float] = field(default_factory=dict)
    initial_metrics: dict[str, float] = field(default_factory=dict)
    last_metrics: dict[str, float] = field(default_factory=dict)
    evals_without_improvement: int = 0
    stopped_early: bool = False
    train_seconds: float = 0.0
    pairs_seen: int = 0


@dataclass
class _Run:
    """What one training run works with (built once by :func:`_prepare`)."""

    params: TrainParams
    runtime: RuntimeSettings
    outputs: OutputPaths
    ctx: DistContext
    student: Any
    objective: nn.Module
    module: "DistillationModule"
    train: TokenizedPairs
    validation: ValidationData
    featurize: Featurizer
    weights: DevScoreWeights
    fingerprint: str
    head_fit: str | None
    teacher_spec: str = ""  # the teacher the vectors come from (recorded with a teacher-space adapter)
    frozen_states: Any = None  # FrozenStates of train.student.cache_frozen (None: steps start from token ids)

    def step_features(self, pairs: list[int]) -> dict[str, torch.Tensor]:
        """A step's student inputs: the sources of ``pairs``, then their translations."""
        if self.frozen_states is not None:
            return self.frozen_states.features(pairs, self.ctx.device)
        return self.featurize([self.train.src[i] for i in pairs] + [self.train.tgt[i] for i in pairs])

    def measure(self) -> dict[str, float]:
        return validate(self.student, self.objective, self.featurize, self.validation, self.params.eval_batch_size,
                        self.weights, self.params.dev_mining_threshold)


def train_student(
    train_file: str | Path,
    dev_file: str | Path,
    teacher_dir: str | Path,
    student_spec: str,
    params: TrainParams | dict[str, Any],
    outputs: OutputPaths | None = None,
    *,
    teacher_spec: str | None = None,
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
    ``vocabulary: corpus`` student keeps the pieces of, with the train and dev pairs'); writes the student chosen on dev data (best checkpoint by
    ``params.selection_metric``, then the best ``params.interpolation`` weight) to
    ``outputs.model_dir`` as a sentence-transformers folder, plus metrics JSON, history CSV and
    the curves PNG. Resumes automatically from ``outputs.checkpoint_dir/last.pt`` when it was
    written by a run with the same settings and data. Under ``torchrun`` it trains with DDP
    (only rank 0 writes). Raises :class:`XdistillError` on bad input, a collapsed or a diverged student.
    """
    params = params if isinstance(params, TrainParams) else TrainParams.from_params(params)
    outputs = outputs or OutputPaths()
    runtime = runtime or RuntimeSettings()
    ctx = DistContext.from_env(device)
    try:
        run = _prepare(Path(train_file), Path(dev_file), Path(teacher_dir), student_spec, params, outputs,
                       teacher_spec, ctx, dev_sts_dir, runtime, dev_mining_file, raw_dir)
        return _train(run)
    finally:
        ctx.close()


def _prepare(train_file: Path, dev_file: Path, teacher_dir: Path, student_spec: str, params: TrainParams,
             outputs: OutputPaths, teacher_spec: str | None, ctx: DistContext, dev_sts_dir: str | Path | None,
             runtime: RuntimeSettings, dev_mining_file: str | Path | None = None,
             raw_dir: str | Path | None = DEFAULT_RAW_DIR) -> _Run:
    """Load data, teacher vectors and the student; tokenise everything once."""
    from xdistill.imports import code_digest
    from xdistill.models import default_prompt, model_fingerprint
    from xdistill.training.teacher_store import TeacherStore

    if runtime.threads:
        torch.set_num_threads(runtime.threads)
    params.check_world_size(ctx.world_size)
    # the dev mining blocks are optional: the file when this run has one (validation warns when it is missing)
    dev_mining = Path(dev_mining_file) if dev_mining_file and Path(dev_mining_file).is_file() else None
    if ctx.device.type == "cpu" and params.autocast_bf16 in ("auto", "always"):
        native = cpu_has_native_bf16()
        if params.autocast_bf16 == "auto":
            logger.info("train.autocast_bf16 auto: %s", "bf16 steps (this CPU has bf16 instructions)" if native
                        else "fp32 steps (this CPU has no bf16 instructions)")
        elif not native:
            logger.warning("train.autocast_bf16 is always, but this CPU has no bf16 instructions: its bf16 steps "
                           "are emulated, slower than fp32 ones")
    store = TeacherStore.open(teacher_dir, teacher_spec=teacher_spec)
    train_pairs = read_parallel_pairs(train_file).spread(params.train_max_pairs)
    dev_pairs = read_parallel_pairs(dev_file).spread(params.dev_max_pairs)
    if len(train_pairs) < params.micro_batch:
        raise XdistillError(f"{train_file}: {len(train_pairs)} pairs, fewer than one batch of {params.micro_batch}")

    student_config = StudentConfig.from_params(student_spec, params.student, params.max_seq_length)
    ckpt.seed_everything(params.seed)
    student = build_student(student_config, device=ctx.device, seed=params.seed, teacher_dim=store.dimension,
                            parallel_files=(train_file, dev_file, *([dev_mining] if dev_mining else [])),
                            raw_dir=raw_dir)
    if params.interpolation and params.interpolation_from == "base":
        from xdistill.training.interpolation import check_identity_head

        check_identity_head(student)
    prompt = default_prompt(student)
    objective = build_objective(params.loss, student.get_embedding_dimension(), store.dimension).to(ctx.device)
    sts_languages = sorted(set(dev_pairs.langs) - {""})
    # everything a checkpoint's weights depend on: a finished run's last.pt is reused as the result
    # (persisted across `dvc repro`), so new code, new student weights or new dev data must not match it
    fingerprint = ckpt.run_fingerprint({
        "params": params.loop_settings(),
        "student": student_config.as_dict(),
        "student_weights": model_fingerprint(student_spec),
        "code": code_digest(__name__),
        "teacher": store.teacher_id,
        "train": ckpt.file_digest(train_file),
        "dev": ckpt.file_digest(dev_file),
        "dev_sts": [sts_dev_digests(dev_sts_dir, sts_languages), sts_languages],
        "dev_mining": ckpt.file_digest(dev_mining) if dev_mining else None,
        "world_size": ctx.world_size,
        # the same settings train other weights on a GPU or in bf16: such a last.pt is no result of this run
        "device": ctx.device.type,
        "bf16_steps": uses_bf16_autocast(ctx.device, params.autocast_bf16),
        # a trimmed vocabulary follows its corpus (the evaluation sets too): rows of another one mean other pieces
        "vocabulary": vocabulary_digest(student) if student_config.vocabulary else None,
    })
    logger.info("tokenising %d train and %d dev pairs (prompt %r, max %d tokens)",
                len(train_pairs), len(dev_pairs), prompt, params.max_seq_length)
    train = tokenize_pairs(train_pairs, student, prompt, params.max_seq_length, store)
    # dev data is embedded as users embed: whole inputs up to the student's own limit
    eval_length = student.max_seq_length or params.max_seq_length
    validation = ValidationData(
        tokenize_pairs(dev_pairs, student, prompt, eval_length, store),
        load_sts_dev(dev_sts_dir, sts_languages, student.tokenizer, prompt, eval_length, params.dev_sts_max_pairs),
        load_mining_blocks(dev_mining_file, student.tokenizer, prompt, eval_length),
    )
    logger.info("validation: %d dev pairs, %d STS dev sets (%s), dev mining blocks: %s", len(validation.pairs),
                len(validation.sts), ", ".join(s.name for s in validation.sts) or "none",
                ", ".join(f"{b.lang} {len(b.src)}" for b in validation.mining_blocks) or "none")
    featurize = Featurizer(student, ctx.device)
    frozen_states, cached_layers = None, 0
    if student_config.cache_frozen:
        from xdistill.training.frozen_cache import compute_frozen_states

        cached_layers = student_config.freeze_layers
        frozen_states = compute_frozen_states(student, featurize, train, cached_layers, params.eval_batch_size)
    return _Run(params, runtime, outputs, ctx, student, objective, DistillationModule(student, objective, cached_layers),
                train, validation, featurize, DevScoreWeights.from_params(params.dev_score_weights),
                fingerprint, student_config.head_fit if student_config.align_to_teacher else None,
                teacher_spec or store.teacher_spec, frozen_states)


def _train(run: _Run) -> TrainResult:
    params, outputs, ctx = run.params, run.outputs, run.ctx
    optimizer = make_optimizer(run.module, params)
    scheduler = linear_schedule(optimizer, params.steps, params.warmup_ratio)
    state = _LoopState()
    resumed_from: int | None = None
    checkpoint = ckpt.load_checkpoint(outputs.checkpoint_dir, ckpt.LAST, run.fingerprint)
    if checkpoint is not None:
        resumed_from = _restore(checkpoint, run.student, run.objective, optimizer, scheduler, state, ctx)
        if ctx.is_main:  # a best written just before a kill: kept only if the restored state knows it
            ckpt.settle_best(outputs.checkpoint_dir, state.best_step)
        logger.info("resuming from %s at step %d", outputs.checkpoint_dir / ckpt.LAST, resumed_from)
    else:
        if ctx.is_main:
            ckpt.clear_checkpoints(outputs.checkpoint_dir)
        ctx.barrier()
        if run.head_fit is not None:
            from xdistill.training.alignment import align_head_to_teacher

            mse = align_head_to_teacher(run.student, run.objective, run.featurize, run.train, params.align_pairs,
                                        params.eval_batch_size, run.head_fit)
            logger.info("fitted the student's head to the teacher's space (%s, %d pairs): mse %.6f",
                        run.head_fit, min(params.align_pairs, len(run.train)), mse)
        if ctx.is_main:
            ckpt.save_checkpoint(outputs.checkpoint_dir, INITIAL, {
                "fingerprint": run.fingerprint, "step": 0, "model": trainable_state_dict(run.student)})
        # Each process draws its own dropout masks, reproducibly.
        ckpt.seed_everything(params.seed + 1000 * ctx.rank)

    wrapped: nn.Module = run.module
    if ctx.distributed:
        wrapped = DistributedDataParallel(
            run.module,
            device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None,
            find_unused_parameters=True,
        )
    stream = BatchStream(run.train.lengths, params.micro_batch, params.seed, position=state.position)

    if state.step == 0 and not state.history:
        metrics = run.measure()
        state.initial_metrics = dict(metrics)
        _record_eval(state, params, 0, metrics)
        check_collapse(metrics, params.collapse_threshold, 0)
        check_selection_metric(metrics, params.selection_metric)

    _run_loop(run, wrapped, optimizer, scheduler, stream, state)

    interpolation: dict[str, Any] | None = None
    frozen_cache = run.frozen_states.summary() if run.frozen_states is not None else None
    if ctx.is_main:
        best = ckpt.load_checkpoint(outputs.checkpoint_dir, ckpt.BEST, run.fingerprint)
        if best is not None:
            load_trainable_state_dict(run.student, best["model"])
        elif state.best_metrics:  # exporting the last step instead would contradict every report of best_step
            raise XdistillError(f"{outputs.checkpoint_dir / ckpt.BEST} (step {state.best_step}, the best on dev data) "
                                "is missing or unreadable: delete the checkpoint folder to train again")
        if params.interpolation:
            interpolation = _interpolate(run, state)
        rotation, sample_embeddings = _rotate_to_teacher(run) if params.export_rotation else (None, None)
        save_student(run.student, outputs.model_dir)
        adapter = _fit_teacher_adapter(run, outputs.model_dir, sample_embeddings)
        if outputs.start_dir is not None:
            _save_start(run)
        write_reports(state, params, outputs, resumed_from, interpolation, rotation, adapter, frozen_cache)
    ctx.barrier()
    return TrainResult(
        output_dir=outputs.model_dir,
        steps_completed=state.step,
        best_step=state.best_step,
        stopped_early=state.stopped_early,
        resumed_from_step=resumed_from,
        initial=state.initial_metrics,
        best=state.best_metrics,
        last=state.last_metrics,
        pairs_per_second=state.pairs_seen / max(state.train_seconds, 1e-9),
        history=state.history,
        interpolation=interpolation,
        train_seconds=state.train_seconds,
        frozen_cache=frozen_cache,
    )


def _rotate_to_teacher(run: _Run) -> tuple[dict[str, Any], tuple[int, torch.Tensor] | None]:
    """Rotate the chosen student onto the teacher's space and measure it again on dev data, for the report;
    also the rotated student's embeddings of its fit sample, keyed by the sample's size (None when skipped).

    A student that cannot share the teacher's space (a low-dimensional head) is exported as it is,
    the reason logged and reported: the option is on by default, and such a head is a deliberate choice.
    """
    from xdistill.training.alignment import rotate_output_to_teacher, rotation_unavailable

    reason = rotation_unavailable(run.student, run.train.teacher.shape[1])
    if reason is not None:
        logger.warning("train.export_rotation skipped: %s", reason)
        return {"skipped": reason}, None
    fit, embeddings = rotate_output_to_teacher(run.student, run.featurize, run.train, run.params.align_pairs,
                                               run.params.eval_batch_size)
    logger.info("rotated the exported student onto the teacher's space (%d pairs): mse %.6f -> %.6f",
                fit["pairs"], fit["mse_before"], fit["mse_after"])
    return {**fit, "measured": run.measure()}, (run.params.align_pairs, embeddings)


def _fit_teacher_adapter(run: _Run, folder: Path,
                         sample_embeddings: tuple[int, torch.Tensor] | None = None) -> dict[str, Any] | None:
    """Fit the teacher-space adapter (``train.teacher_adapter``) of the exported student and save it into its
    folder ``folder``; its report (None when off). The student's own output is left as it is; the adapter is
    its second output for users of an index built by the teacher (:mod:`xdistill.models.teacher_adapter`).
    The same adapter on the student as training started is the ``start_adapter`` stage's
    (:mod:`xdistill.training.start_adapter`), run-cached for every recipe that shares that start.
    """
    from xdistill.training.teacher_adapter import AdapterSettings, fit_and_save_adapter

    settings = AdapterSettings.from_params(run.params.teacher_adapter)
    if not settings.enabled:
        return None
    report = fit_and_save_adapter(run.student, run.featurize, run.train, run.validation.pairs, settings,
                                  run.teacher_spec, run.params.eval_batch_size, folder, sample_embeddings)
    logger.info("teacher-space adapter of %s fitted on %d pairs: dev teacher-space accuracy %.2f", folder,
                report["pairs"], report["dev_teacher_accuracy"])
    return report


def _interpolate(run: _Run, state: _LoopState) -> dict[str, Any]:
    """Leave the student at the interpolation weight that validates best; what was measured, for the report."""
    from xdistill.training.interpolation import choose_interpolation

    params = run.params
    start = ckpt.load_checkpoint(run.outputs.checkpoint_dir, INITIAL, run.fingerprint)
    if start is None:
        raise XdistillError(f"{run.outputs.checkpoint_dir / INITIAL} is missing: cannot interpolate "
                            "(delete the checkpoint folder to train from the start)")
    end = trainable_state_dict(run.student)
    origin = start["model"]
    known = {0.0: state.initial_metrics}
    if params.interpolation_from == "base":
        from xdistill.training.alignment import mean_pooled_norm
        from xdistill.training.interpolation import with_identity_head

        load_trainable_state_dict(run.student, origin)  # the encoder as it started: its pooled norms
        scale = 1.0 / mean_pooled_norm(run.student, run.featurize, run.train, params.eval_batch_size)
        origin, known = with_identity_head(run.student, origin, scale), {}
    if state.best_metrics:
        known[1.0] = state.best_metrics
    metric = params.selection_metric
    alpha, results = choose_interpolation(
        run.student, origin, end, params.interpolation, run.measure,
        lambda value, best: is_better(metric, value, best), metric, known, params.interpolation_tolerance)
    for a, metrics in results.items():
        logger.info("interpolation a=%.2f: %s %.3f", a, metric, metrics[metric])
    logger.info("exporting the interpolation a=%.2f of the %s and the best student", alpha,
                "untrained base" if params.interpolation_from == "base" else "starting student")
    return {"alpha": alpha, "metric": metric, "from": params.interpolation_from,
            "tolerance": params.interpolation_tolerance, "selected": results[alpha],
            "by_alpha": {f"{a:g}": m for a, m in results.items()}}


def _save_start(run: _Run) -> None:
    """Write the student as training started (loads the initial weights: call after the export)."""
    start = ckpt.load_checkpoint(run.outputs.checkpoint_dir, INITIAL, run.fingerprint)
    if start is None:
        raise XdistillError(f"{run.outputs.checkpoint_dir / INITIAL} is missing: cannot write the starting student")
    load_trainable_state_dict(run.student, start["model"])
    save_student(run.student, run.outputs.start_dir)


def _run_loop(run: _Run, wrapped: nn.Module, optimizer, scheduler, stream: BatchStream, state: _LoopState) -> None:
    params, outputs, ctx, train = run.params, run.outputs, run.ctx, run.train
    log_every = run.runtime.log_every
    trainable = [p for p in run.module.parameters() if p.requires_grad]
    wrapped.train()
    window_start, window_pairs, window_steps = time.perf_counter(), 0, 0  # a resumed run's first window is short
    window_parts: dict[str, float] = {}
    while state.step < params.steps and not state.stopped_early:
        step_start = time.perf_counter()
        for micro in range(params.grad_accumulation):
            batch = stream.next()
            local = batch[ctx.rank :: ctx.world_size]
            features = run.step_features(local)
            teacher = train.teacher[torch.as_tensor(local)].to(ctx.device, non_blocking=True)
            last_micro = micro == params.grad_accumulation - 1
            sync = contextlib.nullcontext() if (last_micro or not ctx.distributed) else wrapped.no_sync()
            with sync, autocast_context(ctx.device, params.autocast_bf16):
                total, parts = wrapped(features, teacher)
                (total / params.grad_accumulation).backward()
            for name, value in {"loss": total, **parts}.items():
                window_parts[name] = window_parts.get(name, 0.0) + float(value.detach()) / params.grad_accumulation
        grad_norm = torch.nn.utils.clip_grad_norm_(trainable, params.max_grad_norm)
        if not torch.isfinite(grad_norm):
            # stepping would write NaN into every weight, and the dev metrics (all NaN) would never say so
            raise TrainingDivergedError(state.step + 1, float(grad_norm), float(total.detach()))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        state.step += 1
        state.position = stream.position
        state.pairs_seen += params.batch_size
        state.train_seconds += time.perf_counter() - step_start
        window_pairs += params.batch_size
        window_steps += 1

        if state.step % log_every == 0 or state.step == params.steps:
            averaged = ctx.mean({k: v / window_steps for k, v in window_parts.items()})
            elapsed = time.perf_counter() - window_start
            rate = window_pairs / max(elapsed, 1e-9)
            row = {"step": state.step, "kind": "train", "lr": scheduler.get_last_lr()[0],
                   "grad_norm": float(grad_norm), "pairs_per_second": rate, **averaged}
            state.history.append(row)
            eta = (params.steps - state.step) * params.batch_size / max(rate, 1e-9)
            if ctx.is_main:
                logger.info("step %d/%d  loss %.5f  lr %.2e  %.1f pairs/s  eta %.0f s",
                            state.step, params.steps, averaged.get("loss", float("nan")), row["lr"], rate, eta)
            window_start, window_pairs, window_steps, window_parts = time.perf_counter(), 0, 0, {}

        evaluated, pending_step = False, None
        if state.step % params.eval_every == 0 or state.step == params.steps:
            metrics = run.measure()
            improved = _record_eval(state, params, state.step, metrics)
            check_collapse(metrics, params.collapse_threshold, state.step)
            if improved and ctx.is_main:
                ckpt.save_checkpoint(outputs.checkpoint_dir, ckpt.BEST_PENDING, {
                    "fingerprint": run.fingerprint, "step": state.step, "model": trainable_state_dict(run.student)})
                pending_step = state.step
            patience = params.early_stopping_patience
            if patience is not None and state.evals_without_improvement >= patience:
                state.stopped_early = True
                if ctx.is_main:
                    logger.info("early stopping at step %d: no dev improvement in %d evaluations (best: step %d)",
                                state.step, patience, state.best_step)
            evaluated = True
        if evaluated or state.step % params.checkpoint_every == 0:
            _save_last(outputs.checkpoint_dir, run.fingerprint, run.student, run.objective, optimizer, scheduler,
                       state, ctx)
            if ctx.is_main:  # the loop knows which step it wrote: no need to load the file back
                ckpt.settle_best(outputs.checkpoint_dir, state.best_step, pending_step)


def check_selection_metric(metrics: dict[str, float], metric: str) -> None:
    """Refuse a selection metric this run cannot measure (NaN at the start: no STS dev data for dev_sts, a
    low-dimensional head without feature distillation for dev_mse_x100, ...): no checkpoint would ever count
    as better, no best.pt would be written and the export would silently be the last step, never chosen on
    dev data."""
    if not math.isfinite(metrics[metric]):
        raise XdistillError(f"params train.selection_metric {metric} is {metrics[metric]} for this run (not measured "
                            "with these settings and dev data): choose another one or give it its dev data")


def _record_eval(state: _LoopState, params: TrainParams, step: int, metrics: dict[str, float]) -> bool:
    """Append an evaluation to the history and update the best/early-stopping state."""
    state.history.append({"step": step, "kind": "dev", **metrics})
    state.last_metrics = dict(metrics)
    logger.info("dev @ step %d: score %.2f  sts %.2f  acc %.2f  teacher-space acc %.2f  mse x100 %.4f  mean cos %.3f",
                step, metrics["dev_score"], metrics["dev_sts"], metrics["dev_accuracy"],
                metrics["dev_teacher_accuracy"], metrics["dev_mse_x100"], metrics["dev_mean_pairwise_cosine"])
    value = metrics[params.selection_metric]
    # the start is no checkpoint candidate: it competes through train.interpolation's a = 0
    if step > 0 and is_better(params.selection_metric, value, state.best_value):
        state.best_value, state.best_step, state.best_metrics = value, step, dict(metrics)
        state.evals_without_improvement = 0
        return True
    if step > 0:
        state.evals_without_improvement += 1
    return False


def _save_last(directory: Path, fingerprint: str, student, objective, optimizer, scheduler,
               state: _LoopState, ctx: DistContext) -> None:
    rng_states = ctx.gather_objects(ckpt.capture_rng_state())
    if ctx.is_main:
        ckpt.save_checkpoint(directory, ckpt.LAST, {
            "fingerprint": fingerprint,
            "model": trainable_state_dict(student),
            "objective": objective.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "rng": rng_states,
            "loop": asdict(state),
        })
    ctx.barrier()


def _restore(payload: dict[str, Any], student, objective, optimizer, scheduler, state: _LoopState,
             ctx: DistContext) -> int:
    load_trainable_state_dict(student, payload["model"])
    objective.load_state_dict(payload["objective"])
    optimizer.load_state_dict(payload["optimizer"])
    scheduler.load_state_dict(payload["scheduler"])
    for key, value in payload["loop"].items():
        setattr(state, key, value)
    ckpt.restore_rng_state(payload["rng"][ctx.rank])
    return state.step
