"""The distillation training loop and the ``train`` stage function.

One optimiser step sees ``batch_size`` parallel pairs (split into ``grad_accumulation``
micro-batches, and each micro-batch split over the processes of a ``torchrun`` job). Source and
translation of a micro-batch go through the student in one forward pass; the teacher side comes
from the precomputed :class:`~xdistill.training.teacher_store.TeacherStore`.

The loop: AdamW with linear warm-up and decay, gradient clipping, bf16 autocast on GPU, periodic
dev evaluation (MSE against the teacher, translation accuracy both ways, mean pairwise cosine)
with best-checkpoint selection, early stopping and a collapse guard, atomic checkpoints for exact
resume, progress logging, and the training curves (CSV, JSON metrics, PNG).
"""

from __future__ import annotations

import contextlib
import csv
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from xdistill.errors import XdistillError
from xdistill.io import atomic_path, write_json_atomic
from xdistill.training import checkpoint as ckpt
from xdistill.training.distributed import DistContext
from xdistill.training.pairs import BatchStream, ParallelPairs, pad_batch, read_parallel_pairs, tokenize_texts
from xdistill.training.student import (
    StudentConfig,
    build_student,
    load_trainable_state_dict,
    save_student,
    trainable_state_dict,
)

logger = logging.getLogger(__name__)

SELECTION_METRICS = {"dev_mse": "min", "dev_accuracy": "max"}


@dataclass
class TrainParams:
    """The ``train`` section of params.yaml (see the comments there)."""

    seed: int = 42
    steps: int = 200
    batch_size: int = 32
    grad_accumulation: int = 1
    learning_rate: float = 5e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    max_grad_norm: float = 1.0
    max_seq_length: int = 64
    eval_every: int = 50
    checkpoint_every: int = 50
    log_every: int = 10
    early_stopping_patience: int | None = 3
    selection_metric: str = "dev_mse"
    collapse_threshold: float = 0.95
    train_max_pairs: int | None = None
    dev_max_pairs: int | None = 500
    eval_batch_size: int = 128
    align_pairs: int = 512  # pairs used to fit the Procrustes head (student.align_to_teacher)
    threads: int | None = None
    student: dict[str, Any] = field(default_factory=dict)
    loss: dict[str, Any] = field(default_factory=lambda: {"mse": 1.0})

    @classmethod
    def from_params(cls, section: dict[str, Any] | None) -> TrainParams:
        section = dict(section or {})
        known = set(cls.__dataclass_fields__)
        unknown = set(section) - known
        if unknown:
            raise XdistillError(f"params train: unknown keys {sorted(unknown)} (known: {sorted(known)})")
        # YAML reads "2e-5" (no dot) as a string: coerce the numeric fields.
        for name in ("learning_rate", "weight_decay", "warmup_ratio", "max_grad_norm", "collapse_threshold"):
            if name in section:
                try:
                    section[name] = float(section[name])
                except (TypeError, ValueError) as exc:
                    raise XdistillError(f"params train.{name} must be a number, got {section[name]!r}") from exc
        params = cls(**section)
        params.validate()
        return params

    def validate(self) -> None:
        if self.steps < 1 or self.batch_size < 1 or self.grad_accumulation < 1:
            raise XdistillError("params train: steps, batch_size and grad_accumulation must be >= 1")
        if self.batch_size % self.grad_accumulation:
            raise XdistillError(
                f"params train: batch_size {self.batch_size} is not a multiple of grad_accumulation "
                f"{self.grad_accumulation}"
            )
        if self.selection_metric not in SELECTION_METRICS:
            raise XdistillError(f"params train.selection_metric must be one of {sorted(SELECTION_METRICS)}")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise XdistillError("params train.warmup_ratio must be in [0, 1)")
        if self.eval_every < 1 or self.checkpoint_every < 1 or self.log_every < 1:
            raise XdistillError("params train: eval_every, checkpoint_every and log_every must be >= 1")

    @property
    def micro_batch(self) -> int:
        """Pairs per forward pass, summed over all processes."""
        return self.batch_size // self.grad_accumulation


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


@dataclass
class OutputPaths:
    """Where the stage writes (defaults are the DVC outputs)."""

    model_dir: Path = Path("models/student")
    checkpoint_dir: Path = Path("data/checkpoints")
    metrics: Path | None = Path("metrics/train.json")
    history_csv: Path | None = Path("reports/train_history.csv")
    plot: Path | None = Path("plots/train_curves.png")

    def __post_init__(self) -> None:
        for name in ("model_dir", "checkpoint_dir", "metrics", "history_csv", "plot"):
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, Path(value))


class DistillationModule(nn.Module):
    """Student + objective as one module, so DDP syncs the projection's gradients too."""

    def __init__(self, student: nn.Module, objective: nn.Module) -> None:
        super().__init__()
        self.student = student
        self.objective = objective

    def forward(self, features: dict[str, torch.Tensor], teacher_src: torch.Tensor):
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
    """Linear warm-up from 0 over ``warmup_ratio`` of the steps, then linear decay to 0."""
    warmup = int(round(total_steps * warmup_ratio))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def mean_pairwise_cosine(embeddings: torch.Tensor) -> float:
    """Mean cosine similarity over all distinct pairs of rows (1.0 = every row identical)."""
    n = embeddings.shape[0]
    if n < 2:
        return 0.0
    unit = torch.nn.functional.normalize(embeddings.double(), dim=1)
    total = unit.sum(dim=0)
    return float((total @ total - n) / (n * (n - 1)))


@dataclass
class TokenizedPairs:
    """Token ids of both sides plus the teacher vectors of the sources."""

    src: list[list[int]]
    tgt: list[list[int]]
    teacher: torch.Tensor  # float32 [n, teacher_dim]

    def __len__(self) -> int:
        return len(self.src)

    @property
    def lengths(self) -> np.ndarray:
        return np.fromiter((max(len(a), len(b)) for a, b in zip(self.src, self.tgt, strict=True)), dtype=np.int64)


def tokenize_pairs(pairs: ParallelPairs, student, prompt: str, max_length: int, store) -> TokenizedPairs:
    tokenizer = student.tokenizer
    teacher = torch.from_numpy(store.lookup(pairs.sources))
    return TokenizedPairs(
        tokenize_texts(tokenizer, pairs.sources, max_length, prompt),
        tokenize_texts(tokenizer, pairs.translations, max_length, prompt),
        teacher,
    )


class Featurizer:
    """Pads token-id lists into the student's input features on the training device."""

    def __init__(self, student, device: torch.device) -> None:
        tokenizer = student.tokenizer
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.with_token_types = "token_type_ids" in getattr(tokenizer, "model_input_names", [])
        self.device = device

    def __call__(self, token_ids: Sequence[Sequence[int]]) -> dict[str, torch.Tensor]:
        features = pad_batch(token_ids, self.pad_id, self.with_token_types)
        return {k: v.to(self.device, non_blocking=True) for k, v in features.items()}


def autocast_context(device: torch.device):
    """bf16 autocast on GPU; plain fp32 on CPU (CPU bf16 is slower on most hosts)."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


@torch.no_grad()
def encode_token_ids(student, featurize: Featurizer, token_ids: Sequence[Sequence[int]], batch_size: int) -> torch.Tensor:
    """Student embeddings (float32, CPU) of pre-tokenised texts, batched in length order."""
    order = np.argsort([-len(ids) for ids in token_ids], kind="stable")
    out: torch.Tensor | None = None
    was_training = student.training
    student.eval()
    try:
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            with autocast_context(featurize.device):
                emb = student(featurize([token_ids[i] for i in batch]))["sentence_embedding"].float().cpu()
            if out is None:
                out = torch.empty((len(order), emb.shape[1]), dtype=torch.float32)
            out[torch.as_tensor(batch)] = emb
    finally:
        student.train(was_training)
    assert out is not None
    return out


def evaluate_dev(student, objective: nn.Module, featurize: Featurizer, dev: TokenizedPairs, batch_size: int) -> dict[str, float]:
    """Dev MSE against the teacher, translation accuracy both ways, mean pairwise cosine."""
    from xdistill.mining.knn import retrieval_accuracy

    src = encode_token_ids(student, featurize, dev.src, batch_size)
    tgt = encode_token_ids(student, featurize, dev.tgt, batch_size)
    teacher = dev.teacher
    src_t, tgt_t = src, tgt
    projection = getattr(objective, "projection", None)
    if src.shape[1] != teacher.shape[1] and projection is not None:
        # Low-dimensional student: compare in the teacher's space through the trained projection.
        with torch.no_grad():
            device = next(projection.parameters()).device
            src_t = projection(src.to(device)).float().cpu()
            tgt_t = projection(tgt.to(device)).float().cpu()
    if src_t.shape[1] == teacher.shape[1]:
        src_mse = float(torch.mean((src_t - teacher) ** 2))
        tgt_mse = float(torch.mean((tgt_t - teacher) ** 2))
    else:  # a low-dimensional student trained without feature distillation has no teacher-space view
        src_mse = tgt_mse = float("nan")
    src2tgt, tgt2src = retrieval_accuracy(src.numpy(), tgt.numpy())
    return {
        "dev_mse": (src_mse + tgt_mse) / 2,
        "dev_mse_src": src_mse,
        "dev_mse_tgt": tgt_mse,
        "dev_accuracy_src2tgt": src2tgt,
        "dev_accuracy_tgt2src": tgt2src,
        "dev_accuracy": (src2tgt + tgt2src) / 2,
        "dev_mean_pairwise_cosine": mean_pairwise_cosine(torch.cat([src, tgt])),
    }


class _Passthrough(nn.Module):
    """Stands in for the Dense head while the student's own (pre-head) embeddings are computed."""

    def forward(self, features: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return features


@contextlib.contextmanager
def head_bypassed(student):
    """The student without its Dense head (the module is swapped back afterwards)."""
    name = next(key for key, module in student._modules.items() if type(module).__name__ == "Dense")
    head = student._modules[name]
    student._modules[name] = _Passthrough()
    try:
        yield head
    finally:
        student._modules[name] = head


def align_head_to_teacher(student, objective: nn.Module, featurize: Featurizer, pairs: TokenizedPairs,
                          n_pairs: int, batch_size: int) -> float:
    """Start the student's Dense head (and the feature-distillation projection) in the teacher's space.

    The student's and the teacher's spaces are unrelated at the start (cosine ~0 between
    student(x) and teacher(x)), so plain MSE first drags every embedding towards the teacher's
    mean direction (the mean pairwise cosine of dev embeddings passes 0.97 within ~20 steps
    on mE5) and translation accuracy drops before it recovers. With S the student's own unit
    embeddings of sources and translations and T the teacher vectors of the sources:

    - head to the teacher's dimension (>= the student's): the orthogonal Procrustes map R
      minimising ||S R - T|| (semi-orthogonal when the teacher is wider, e.g. 384 -> 768). It
      keeps every cosine of the student, so training starts with the untrained student's quality
      in the teacher's space;
    - head to a smaller dimension k (LEALLA-style): the top-k principal axes of S (centred), the
      rank-k map that keeps most of what tells embeddings apart; the projection of feature distillation (k -> teacher)
      starts as the least-squares fit of the projected embeddings onto T.

    Returns the MSE to the teacher after alignment (through the projection for a small head).
    """
    from xdistill.training.student import output_dense

    rows = np.linspace(0, len(pairs) - 1, num=min(n_pairs, len(pairs))).round().astype(int)
    ids = [pairs.src[i] for i in rows] + [pairs.tgt[i] for i in rows]
    with head_bypassed(student):
        own = encode_token_ids(student, featurize, ids, batch_size).double()
    teacher = torch.cat([pairs.teacher[torch.as_tensor(rows)]] * 2).double()
    head = output_dense(student).linear
    out_dim, in_dim = head.weight.shape
    if out_dim >= in_dim:
        if out_dim != teacher.shape[1]:
            raise XdistillError(f"cannot align a {in_dim} -> {out_dim} head to a {teacher.shape[1]}-d teacher")
        u, _, vt = torch.linalg.svd(own.T @ teacher, full_matrices=False)
        mapping = u @ vt  # [in, out], y = x @ mapping
        _set_linear(head, mapping.T, torch.zeros(out_dim, dtype=torch.float64))
        return float(torch.mean((own @ mapping - teacher) ** 2))
    # principal axes of the centred embeddings: the common direction every embedding shares
    # (mE5's mean pairwise cosine is ~0.8) carries no information and gets no axis
    _, _, vt = torch.linalg.svd(own - own.mean(dim=0), full_matrices=False)
    axes = vt[:out_dim].T  # [in, k]
    _set_linear(head, axes.T, torch.zeros(out_dim, dtype=torch.float64))
    reduced = F.normalize(own @ axes, dim=-1)  # what the student now outputs (Normalize follows the head)
    projection = getattr(objective, "projection", None)
    if projection is None:
        return float("nan")
    design = torch.cat([reduced, torch.ones(len(reduced), 1, dtype=reduced.dtype)], dim=1)
    ridge = 1e-4 * torch.eye(design.shape[1], dtype=design.dtype)
    solution = torch.linalg.solve(design.T @ design + ridge, design.T @ teacher)  # [k + 1, teacher]
    _set_linear(projection, solution[:-1].T, solution[-1])
    return float(torch.mean((design @ solution - teacher) ** 2))


def _set_linear(linear: nn.Linear, weight: torch.Tensor, bias: torch.Tensor) -> None:
    with torch.no_grad():
        linear.weight.copy_(weight.to(linear.weight.dtype))
        linear.bias.copy_(bias.to(linear.bias.dtype))


def check_collapse(metrics: dict[str, float], threshold: float, step: int) -> None:
    """Fail loud when dev embeddings have collapsed towards one direction."""
    value = metrics["dev_mean_pairwise_cosine"]
    if value > threshold:
        raise XdistillError(
            f"training collapsed at step {step}: mean pairwise cosine of dev embeddings is {value:.4f} "
            f"> train.collapse_threshold {threshold} (all sentences map to nearly the same vector; "
            "lower train.learning_rate, check the loss weights, or raise the threshold if the base model "
            "is this anisotropic from the start)"
        )


def is_better(metric: str, value: float, best: float | None) -> bool:
    if best is None or math.isnan(best):
        return True
    return value < best if SELECTION_METRICS[metric] == "min" else value > best


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
) -> TrainResult:
    """Distill ``student_spec`` towards the teacher vectors in ``teacher_dir``; the ``train`` stage.

    Reads the parallel ``train_file``/``dev_file`` (gzipped TSV with a ``source, translation,
    lang, corpus`` header), writes the best student (by ``params.selection_metric`` on dev) to
    ``outputs.model_dir`` as a sentence-transformers folder, plus metrics JSON, history CSV and
    the curves PNG. Resumes automatically from ``outputs.checkpoint_dir/last.pt`` when it was
    written by a run with the same settings and data. Under ``torchrun`` it trains with DDP
    (only rank 0 writes). Raises :class:`XdistillError` on bad input or a collapsed student.
    """
    params = params if isinstance(params, TrainParams) else TrainParams.from_params(params)
    outputs = outputs or OutputPaths()
    ctx = DistContext.from_env(device)
    try:
        return _train(Path(train_file), Path(dev_file), Path(teacher_dir), student_spec, params, outputs,
                      teacher_spec, ctx)
    finally:
        ctx.close()


def _train(train_file: Path, dev_file: Path, teacher_dir: Path, student_spec: str, params: TrainParams,
           outputs: OutputPaths, teacher_spec: str | None, ctx: DistContext) -> TrainResult:
    from xdistill.models import default_prompt
    from xdistill.training.teacher_store import TeacherStore

    if params.threads:
        torch.set_num_threads(params.threads)
    if params.micro_batch % ctx.world_size:
        raise XdistillError(
            f"params train: a micro-batch of {params.micro_batch} pairs does not split evenly over "
            f"{ctx.world_size} processes"
        )
    store = TeacherStore.open(teacher_dir, teacher_spec=teacher_spec)
    train_pairs = read_parallel_pairs(train_file).spread(params.train_max_pairs)
    dev_pairs = read_parallel_pairs(dev_file).spread(params.dev_max_pairs)
    if len(train_pairs) < params.micro_batch:
        raise XdistillError(f"{train_file}: {len(train_pairs)} pairs, fewer than one batch of {params.micro_batch}")

    student_config = StudentConfig.from_params(student_spec, params.student, params.max_seq_length)
    ckpt.seed_everything(params.seed)
    student = build_student(student_config, device=ctx.device, seed=params.seed, teacher_dim=store.dimension)
    prompt = default_prompt(student)
    objective = build_objective(params.loss, student.get_embedding_dimension(), store.dimension).to(ctx.device)
    module = DistillationModule(student, objective)

    fingerprint = ckpt.run_fingerprint({
        "params": asdict(params) | {"threads": None, "log_every": None},
        "student": student_config.as_dict(),
        "teacher": store.teacher_id,
        "train": ckpt.file_digest(train_file),
        "dev": ckpt.file_digest(dev_file),
        "world_size": ctx.world_size,
    })
    logger.info("tokenising %d train and %d dev pairs (prompt %r, max %d tokens)",
                len(train_pairs), len(dev_pairs), prompt, params.max_seq_length)
    train = tokenize_pairs(train_pairs, student, prompt, params.max_seq_length, store)
    dev = tokenize_pairs(dev_pairs, student, prompt, params.max_seq_length, store)
    featurize = Featurizer(student, ctx.device)

    optimizer = make_optimizer(module, params)
    scheduler = linear_schedule(optimizer, params.steps, params.warmup_ratio)
    state = _LoopState()
    resumed_from: int | None = None
    checkpoint = ckpt.load_checkpoint(outputs.checkpoint_dir, ckpt.LAST, fingerprint)
    if checkpoint is not None:
        resumed_from = _restore(checkpoint, student, objective, optimizer, scheduler, state, ctx)
        logger.info("resuming from %s at step %d", outputs.checkpoint_dir / ckpt.LAST, resumed_from)
    else:
        if ctx.is_main:
            ckpt.clear_checkpoints(outputs.checkpoint_dir)
        ctx.barrier()
        if student_config.align_to_teacher:
            mse = align_head_to_teacher(student, objective, featurize, train, params.align_pairs,
                                        params.eval_batch_size)
            logger.info("aligned the student's head to the teacher's space (%d pairs): mse %.6f",
                        min(params.align_pairs, len(train)), mse)
        # Each process draws its own dropout masks, reproducibly.
        ckpt.seed_everything(params.seed + 1000 * ctx.rank)

    wrapped: nn.Module = module
    if ctx.distributed:
        wrapped = DistributedDataParallel(
            module,
            device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None,
            find_unused_parameters=True,
        )
    stream = BatchStream(train.lengths, params.micro_batch, params.seed, position=state.position)

    if state.step == 0 and not state.history:
        metrics = evaluate_dev(student, objective, featurize, dev, params.eval_batch_size)
        state.initial_metrics = dict(metrics)
        _record_eval(state, params, 0, metrics)
        check_collapse(metrics, params.collapse_threshold, 0)

    _run_loop(wrapped, module, student, objective, optimizer, scheduler, stream, train, dev, featurize,
              params, outputs, state, ctx, fingerprint)

    if ctx.is_main:
        best = ckpt.load_checkpoint(outputs.checkpoint_dir, ckpt.BEST, fingerprint)
        if best is not None:
            load_trainable_state_dict(student, best["model"])
        save_student(student, outputs.model_dir)
        _write_reports(state, params, outputs, resumed_from)
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
    )


def _run_loop(wrapped, module, student, objective, optimizer, scheduler, stream: BatchStream,
              train: TokenizedPairs, dev: TokenizedPairs, featurize: Featurizer, params: TrainParams,
              outputs: OutputPaths, state: _LoopState, ctx: DistContext, fingerprint: str) -> None:
    trainable = [p for p in module.parameters() if p.requires_grad]
    wrapped.train()
    window_start, window_pairs = time.perf_counter(), 0
    window_parts: dict[str, float] = {}
    while state.step < params.steps and not state.stopped_early:
        step_start = time.perf_counter()
        for micro in range(params.grad_accumulation):
            batch = stream.next()
            local = batch[ctx.rank :: ctx.world_size]
            features = featurize([train.src[i] for i in local] + [train.tgt[i] for i in local])
            teacher = train.teacher[torch.as_tensor(local)].to(ctx.device, non_blocking=True)
            last_micro = micro == params.grad_accumulation - 1
            sync = contextlib.nullcontext() if (last_micro or not ctx.distributed) else wrapped.no_sync()
            with sync, autocast_context(ctx.device):
                total, parts = wrapped(features, teacher)
                (total / params.grad_accumulation).backward()
            for name, value in {"loss": total, **parts}.items():
                window_parts[name] = window_parts.get(name, 0.0) + float(value.detach()) / params.grad_accumulation
        grad_norm = torch.nn.utils.clip_grad_norm_(trainable, params.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        state.step += 1
        state.position = stream.position
        state.pairs_seen += params.batch_size
        state.train_seconds += time.perf_counter() - step_start
        window_pairs += params.batch_size

        if state.step % params.log_every == 0 or state.step == params.steps:
            steps_in_window = params.log_every if state.step % params.log_every == 0 else state.step % params.log_every
            averaged = ctx.mean({k: v / steps_in_window for k, v in window_parts.items()})
            elapsed = time.perf_counter() - window_start
            rate = window_pairs / max(elapsed, 1e-9)
            row = {"step": state.step, "kind": "train", "lr": scheduler.get_last_lr()[0],
                   "grad_norm": float(grad_norm), "pairs_per_second": rate, **averaged}
            state.history.append(row)
            eta = (params.steps - state.step) * params.batch_size / max(rate, 1e-9)
            if ctx.is_main:
                logger.info("step %d/%d  loss %.5f  lr %.2e  %.1f pairs/s  eta %.0f s",
                            state.step, params.steps, averaged.get("loss", float("nan")), row["lr"], rate, eta)
            window_start, window_pairs, window_parts = time.perf_counter(), 0, {}

        evaluated = False
        if state.step % params.eval_every == 0 or state.step == params.steps:
            metrics = evaluate_dev(student, objective, featurize, dev, params.eval_batch_size)
            improved = _record_eval(state, params, state.step, metrics)
            check_collapse(metrics, params.collapse_threshold, state.step)
            if improved and ctx.is_main:
                ckpt.save_checkpoint(outputs.checkpoint_dir, ckpt.BEST, {
                    "fingerprint": fingerprint, "step": state.step, "model": trainable_state_dict(student)})
            patience = params.early_stopping_patience
            if patience is not None and state.evals_without_improvement >= patience:
                state.stopped_early = True
                if ctx.is_main:
                    logger.info("early stopping at step %d: no dev improvement in %d evaluations (best: step %d)",
                                state.step, patience, state.best_step)
            evaluated = True
        if evaluated or state.step % params.checkpoint_every == 0:
            _save_last(outputs.checkpoint_dir, fingerprint, student, objective, optimizer, scheduler, state, ctx)


def _record_eval(state: _LoopState, params: TrainParams, step: int, metrics: dict[str, float]) -> bool:
    """Append an evaluation to the history and update the best/early-stopping state."""
    state.history.append({"step": step, "kind": "dev", **metrics})
    state.last_metrics = dict(metrics)
    logger.info("dev @ step %d: mse %.6f  acc src->tgt %.3f tgt->src %.3f  mean cos %.3f", step,
                metrics["dev_mse"], metrics["dev_accuracy_src2tgt"], metrics["dev_accuracy_tgt2src"],
                metrics["dev_mean_pairwise_cosine"])
    value = metrics[params.selection_metric]
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


# ----------------------------------------------------------------------------------------------
# Reports
# ----------------------------------------------------------------------------------------------


def _write_reports(state: _LoopState, params: TrainParams, outputs: OutputPaths, resumed_from: int | None) -> None:
    summary = {
        "steps": state.step,
        "best_step": state.best_step,
        "stopped_early": state.stopped_early,
        "resumed_from_step": resumed_from,
        "selection_metric": params.selection_metric,
        "pairs_per_second": round(state.pairs_seen / max(state.train_seconds, 1e-9), 3),
        "train_seconds": round(state.train_seconds, 2),
        "initial": state.initial_metrics,
        "best": state.best_metrics,
        "last": state.last_metrics,
    }
    if outputs.metrics is not None:
        write_json_atomic(outputs.metrics, summary)
    if outputs.history_csv is not None:
        write_history_csv(state.history, outputs.history_csv)
    if outputs.plot is not None:
        from xdistill.training.curves import plot_training_curves

        plot_training_curves(state.history, outputs.plot, best_step=state.best_step)


def write_history_csv(history: list[dict[str, Any]], path: Path) -> None:
    """One row per log/eval event; columns are the union of every event's keys."""
    columns: list[str] = []
    for row in history:
        columns.extend(k for k in row if k not in columns)
    with atomic_path(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(history)
