"""The optimisation loop of one training run: :func:`optimise`.

Resumes from ``last.pt`` when a run of the same fingerprint wrote it; otherwise fits the student's head
to the teacher's space and saves the starting student (:data:`START_CHECKPOINT`). Then AdamW with linear warm-up
and decay, gradient accumulation over micro-batches, gradient clipping, bf16 or fp16 autocast as
``train.precision`` asks (fp16 with a gradient scaler), DDP over several processes; periodic validation
with best-checkpoint selection, early stopping and a collapse guard, and atomic checkpoints for exact
resume. Rank 0 validates and decides; the other processes follow its broadcast decisions.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from xdistill.errors import XdistillError
from xdistill.training import checkpoint as ckpt
from xdistill.training.distributed import DistContext
from xdistill.training.loader import SliceInputs, StepLoader
from xdistill.training.settings import TrainParams
from xdistill.training.setup import TrainingRun
from xdistill.training.student import load_trainable_state_dict, trainable_state_dict
from xdistill.training.tokenized import autocast_context, gradient_scaler
from xdistill.training.validation import check_collapse, is_better

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)

START_CHECKPOINT = "start.pt"  # the student as training started (after head alignment): WiSE-FT's start


class TrainingDivergedError(XdistillError):
    """A training step's gradients were not finite (NaN or inf): raised before the optimizer applies them."""

    def __init__(self, step: int, grad_norm: float, loss: float) -> None:
        super().__init__(
            f"training diverged at step {step}: the gradient norm is {grad_norm} (loss {loss}). The weights "
            "were not updated and the last checkpoint is intact; lower train.learning_rate or set "
            "train.precision to fp32"
        )
        self.step, self.grad_norm, self.loss = step, grad_norm, loss


def make_optimizer(module: nn.Module, params: TrainParams) -> torch.optim.AdamW:
    """AdamW over trainable weights; biases and LayerNorm weights get no weight decay."""
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
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


@dataclass
class LoopState:
    """Where the loop stands; saved with every ``last.pt`` (its fields are the checkpoint's ``loop``)."""

    step: int = 0
    position: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    best_value: float | None = None
    best_step: int = 0
    best_metrics: dict[str, float] = field(default_factory=dict)
    start_metrics: dict[str, float] = field(default_factory=dict)
    last_metrics: dict[str, float] = field(default_factory=dict)
    evals_without_improvement: int = 0
    stopped_early: bool = False
    train_seconds: float = 0.0
    pairs_seen: int = 0


@dataclass(frozen=True)
class LoopOutcome:
    """How the loop ended: its state, and the step it resumed from (None: trained from the start)."""

    state: LoopState
    resumed_from: int | None


def optimise(run: TrainingRun) -> LoopOutcome:
    """Train ``run``'s student for ``train.steps`` steps (or until early stopping), resuming where it can."""
    params, outputs, ctx = run.params, run.outputs, run.ctx
    optimizer = make_optimizer(run.module, params)
    scheduler = linear_schedule(optimizer, params.steps, params.warmup_ratio)
    state = LoopState()
    resumed_from: int | None = None
    checkpoint = ckpt.load_checkpoint(outputs.checkpoint_dir, ckpt.LAST, run.fingerprint)
    check_same_checkpoint(ctx, outputs.checkpoint_dir, checkpoint)
    if checkpoint is not None:
        resumed_from = _restore(checkpoint, run.student, run.objective, optimizer, scheduler, state, ctx)
        if ctx.is_main:  # a best written just before a kill: kept only if the restored state knows it
            ckpt.settle_best(outputs.checkpoint_dir, state.best_step)
        logger.info("resuming from %s at step %d", outputs.checkpoint_dir / ckpt.LAST, resumed_from)
    else:
        _start(run)

    wrapped: nn.Module = run.module
    if ctx.distributed:
        wrapped = DistributedDataParallel(
            run.module,
            device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None,
            find_unused_parameters=True,
        )
    loader = _step_loader(run, state.position)

    if state.step == 0 and not state.history:
        metrics = run.measure()
        state.start_metrics = dict(metrics)
        _record_eval(state, params, 0, metrics)
        check_collapse(metrics, params.collapse_threshold, 0)
        check_selection_metric(metrics, params.selection_metric)

    _run_loop(run, wrapped, optimizer, scheduler, loader, state)
    return LoopOutcome(state, resumed_from)


def _step_loader(run: TrainingRun, position: int) -> StepLoader:
    """This process's micro-batches from ``position`` on, prepared ahead by ``runtime.loader_workers``."""
    ctx, params = run.ctx, run.params
    inputs = SliceInputs(
        run.train,
        params.micro_batch,
        params.seed,
        ctx.rank,
        ctx.world_size,
        run.featurize.pad_id,
        run.featurize.with_token_types,
    )
    workers = 0 if run.frozen_states is not None else run.runtime.loader_workers  # cached states: no padding
    return StepLoader(inputs, position, ctx.device, workers, run.runtime.pin_memory)


def _start(run: TrainingRun) -> None:
    """A fresh start: clear old checkpoints, fit the head to the teacher's space, save the starting student."""
    params, outputs, ctx = run.params, run.outputs, run.ctx
    if ctx.is_main:
        ckpt.clear_checkpoints(outputs.checkpoint_dir)
    ctx.barrier()
    if run.head_fit is not None and ctx.is_main:  # fitted once, then broadcast: every process starts alike
        from xdistill.training.alignment import align_head_to_teacher

        mse = align_head_to_teacher(
            run.student,
            run.objective,
            run.featurize,
            run.train,
            params.align_pairs,
            params.eval_batch_size,
            run.head_fit,
        )
        logger.info(
            "fitted the student's head to the teacher's space (%s, %d pairs): mse %.6f",
            run.head_fit,
            min(params.align_pairs, len(run.train)),
            mse,
        )
    ctx.broadcast_module(run.module)
    if ctx.is_main:
        ckpt.save_checkpoint(
            outputs.checkpoint_dir,
            START_CHECKPOINT,
            {"fingerprint": run.fingerprint, "step": 0, "model": trainable_state_dict(run.student)},
        )
    # Each process draws its own dropout masks, reproducibly.
    ckpt.seed_everything(params.seed + 1000 * ctx.rank)


def _run_loop(run: TrainingRun, wrapped: nn.Module, optimizer, scheduler, loader: StepLoader, state: LoopState) -> None:
    params, outputs, ctx = run.params, run.outputs, run.ctx
    log_every = run.runtime.log_every
    trainable = [p for p in run.module.parameters() if p.requires_grad]
    scaler = gradient_scaler(ctx.device, params.precision)
    wrapped.train()
    window_start, window_pairs, window_steps = time.perf_counter(), 0, 0  # a resumed run's first window is short
    window_parts: dict[str, float] = {}
    while state.step < params.steps and not state.stopped_early:
        step_start = time.perf_counter()
        for micro in range(params.grad_accumulation):
            local, features, teacher = loader.next()
            if run.frozen_states is not None:
                features = run.step_features(local)
            last_micro = micro == params.grad_accumulation - 1
            sync: contextlib.AbstractContextManager[Any]
            if last_micro or not ctx.distributed:
                sync = contextlib.nullcontext()
            else:
                assert isinstance(wrapped, DistributedDataParallel)  # optimise wraps the module when distributed
                sync = wrapped.no_sync()
            with sync, autocast_context(ctx.device, params.precision):
                total, parts = wrapped(features, teacher)
                scaler.scale(total / params.grad_accumulation).backward()
            for name, value in {"loss": total, **parts}.items():
                window_parts[name] = window_parts.get(name, 0.0) + float(value.detach()) / params.grad_accumulation
        scaler.unscale_(optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(trainable, params.max_grad_norm)
        if not torch.isfinite(grad_norm) and not scaler.is_enabled():
            # stepping would write NaN into every weight, and the dev metrics (all NaN) would never say so
            raise TrainingDivergedError(state.step + 1, float(grad_norm), float(total.detach()))
        scaler.step(optimizer)  # fp16: skips a step whose gradients overflowed, and lowers the scale
        scaler.update()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        state.step += 1
        state.position = loader.position
        state.pairs_seen += params.batch_size
        state.train_seconds += time.perf_counter() - step_start
        window_pairs += params.batch_size
        window_steps += 1

        if state.step % log_every == 0 or state.step == params.steps:
            averaged = ctx.mean({k: v / window_steps for k, v in window_parts.items()})
            elapsed = time.perf_counter() - window_start
            rate = window_pairs / max(elapsed, 1e-9)
            row = {
                "step": state.step,
                "kind": "train",
                "lr": scheduler.get_last_lr()[0],
                "grad_norm": float(grad_norm),
                "pairs_per_second": rate,
                **averaged,
            }
            state.history.append(row)
            eta = (params.steps - state.step) * params.batch_size / max(rate, 1e-9)
            if ctx.is_main:
                logger.info(
                    "step %d/%d  loss %.5f  lr %.2e  %.1f pairs/s  eta %.0f s",
                    state.step,
                    params.steps,
                    averaged.get("loss", float("nan")),
                    row["lr"],
                    rate,
                    eta,
                )
            window_start, window_pairs, window_steps, window_parts = time.perf_counter(), 0, 0, {}

        evaluated, pending_step = False, None
        if state.step % params.eval_every == 0 or state.step == params.steps:
            metrics = run.measure()
            improved = _record_eval(state, params, state.step, metrics)
            check_collapse(metrics, params.collapse_threshold, state.step)
            if improved and ctx.is_main:
                ckpt.save_checkpoint(
                    outputs.checkpoint_dir,
                    ckpt.BEST_PENDING,
                    {"fingerprint": run.fingerprint, "step": state.step, "model": trainable_state_dict(run.student)},
                )
                pending_step = state.step
            patience = params.early_stopping_patience
            if patience is not None and state.evals_without_improvement >= patience:
                state.stopped_early = True
                if ctx.is_main:
                    logger.info(
                        "early stopping at step %d: no dev improvement in %d evaluations (best: step %d)",
                        state.step,
                        patience,
                        state.best_step,
                    )
            evaluated = True
        if evaluated or state.step % params.checkpoint_every == 0:
            _save_last(
                outputs.checkpoint_dir, run.fingerprint, run.student, run.objective, optimizer, scheduler, state, ctx
            )
            if ctx.is_main:  # the loop knows which step it wrote: no need to load the file back
                ckpt.settle_best(outputs.checkpoint_dir, state.best_step, pending_step)


def check_same_checkpoint(ctx: DistContext, directory: Path, checkpoint: dict[str, Any] | None) -> None:
    """Refuse to go on when the processes found different checkpoints to resume from: the checkpoint folder
    must be one folder every host of the job sees (shared storage), or their weights would part."""
    steps = ctx.gather_objects(None if checkpoint is None else checkpoint["loop"]["step"])
    if len(set(steps)) > 1:
        found = ", ".join(
            f"rank {rank}: {'none' if step is None else f'step {step}'}" for rank, step in enumerate(steps)
        )
        raise XdistillError(
            f"{directory}: the training processes found different checkpoints to resume from ({found}); "
            "the checkpoint folder must be storage that every host of the job shares"
        )


def check_selection_metric(metrics: dict[str, float], metric: str) -> None:
    """Refuse a selection metric this run cannot measure (NaN at the start: no STS dev data for dev_sts, a
    low-dimensional head without feature distillation for dev_mse_x100, ...): no checkpoint would ever count
    as better, no best.pt would be written and the export would silently be the last step, never chosen on
    dev data."""
    if not math.isfinite(metrics[metric]):
        raise XdistillError(
            f"params train.selection_metric {metric} is {metrics[metric]} for this run (not measured "
            "with these settings and dev data): choose another one or give it its dev data"
        )


def _record_eval(state: LoopState, params: TrainParams, step: int, metrics: dict[str, float]) -> bool:
    """Append an evaluation to the history and update the best/early-stopping state."""
    state.history.append({"step": step, "kind": "dev", **metrics})
    state.last_metrics = dict(metrics)
    logger.info(
        "dev @ step %d: score %.2f  sts %.2f  acc %.2f  teacher-space acc %.2f  mse x100 %.4f  mean cos %.3f",
        step,
        metrics["dev_score"],
        metrics["dev_sts"],
        metrics["dev_accuracy"],
        metrics["dev_teacher_accuracy"],
        metrics["dev_mse_x100"],
        metrics["dev_mean_pairwise_cosine"],
    )
    value = metrics[params.selection_metric]
    # the start is no checkpoint candidate: it competes through train.interpolation's a = 0
    if step > 0 and is_better(params.selection_metric, value, state.best_value):
        state.best_value, state.best_step, state.best_metrics = value, step, dict(metrics)
        state.evals_without_improvement = 0
        return True
    if step > 0:
        state.evals_without_improvement += 1
    return False


def _save_last(
    directory: Path,
    fingerprint: str,
    student: SentenceTransformer,
    objective,
    optimizer,
    scheduler,
    state: LoopState,
    ctx: DistContext,
) -> None:
    rng_states = ctx.gather_objects(ckpt.capture_rng_state())
    if ctx.is_main:
        ckpt.save_checkpoint(
            directory,
            ckpt.LAST,
            {
                "fingerprint": fingerprint,
                "model": trainable_state_dict(student),
                "objective": objective.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "rng": rng_states,
                "loop": asdict(state),
            },
        )
    ctx.barrier()


def _restore(
    payload: dict[str, Any],
    student: SentenceTransformer,
    objective,
    optimizer,
    scheduler,
    state: LoopState,
    ctx: DistContext,
) -> int:
    load_trainable_state_dict(student, payload["model"])
    objective.load_state_dict(payload["objective"])
    optimizer.load_state_dict(payload["optimizer"])
    scheduler.load_state_dict(payload["scheduler"])
    for key, value in payload["loop"].items():
        setattr(state, key, value)
    ckpt.restore_rng_state(payload["rng"][ctx.rank])
    return state.step
