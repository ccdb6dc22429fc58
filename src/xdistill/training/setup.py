"""What one training run works with, built once before the first step: :func:`prepare`.

Loads the parallel pairs, the teacher vectors and the student, tokenises everything once (train and
dev pairs, STS dev sets, dev mining blocks), builds the distillation objective and computes the run's
fingerprint: everything a checkpoint's weights depend on, so a ``last.pt`` of other settings, data or
code is never resumed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from xdistill.errors import XdistillError
from xdistill.models.vocabulary import DEFAULT_RAW_DIR, vocabulary_digest
from xdistill.training import checkpoint as ckpt
from xdistill.training.batches import ParallelPairs, read_parallel_pairs
from xdistill.training.distributed import DistContext
from xdistill.training.settings import OutputPaths, RuntimeSettings, TrainParams
from xdistill.training.student import StudentConfig, build_student
from xdistill.training.tokenized import (
    Featurizer,
    TokenizedPairs,
    cpu_has_native_bf16,
    tokenize_pairs,
)
from xdistill.training.validation import (
    DevScoreWeights,
    ValidationData,
    load_mining_blocks,
    load_sts_dev,
    sts_dev_digests,
    validate,
    validate_rotated,
)

if TYPE_CHECKING:
    import numpy as np
    from sentence_transformers import SentenceTransformer

    from xdistill.teacher.store import TeacherStore

logger = logging.getLogger(__name__)

# The module whose import closure keys the checkpoints: the trainer's entry point reaches this set-up, the
# loop and the export, and everything they import (a change to any of them must not resume an old last.pt).
TRAINER_MODULE = "xdistill.training.trainer"


@dataclass(frozen=True)
class TrainInputs:
    """The files and models one training run reads (its settings are :class:`TrainParams`)."""

    train_file: Path
    dev_file: Path
    teacher_dir: Path
    student_spec: str
    teacher_spec: str | None = None  # the teacher whose vectors to pick in the store (None: the store's own)
    teacher_precision: str = "fp32"  # what the teacher encoded in (teacher_embed.precision): fp16 vectors are others
    dev_sts_dir: str | Path | None = None  # stsb-multi-mt folder whose dev split validates checkpoints
    dev_mining_file: str | Path | None = None  # the dev mining blocks (optional)
    raw_dir: str | Path | None = DEFAULT_RAW_DIR  # staged evaluation sets a ``vocabulary: corpus`` student keeps

    @property
    def dev_mining(self) -> Path | None:
        """The dev mining blocks when this run has them (validation warns when the file is missing)."""
        named = self.dev_mining_file
        return Path(named) if named and Path(named).is_file() else None


class DistillationModule(nn.Module):
    """Student + objective as one module, so DDP syncs the projection's gradients too."""

    def __init__(self, student: SentenceTransformer, objective: nn.Module, cached_layers: int = 0) -> None:
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


def build_objective(loss: dict[str, Any], student_dim: int, teacher_dim: int) -> nn.Module:
    """The configured :class:`DistillationObjective` (weights and hyper-parameters from ``train.loss``)."""
    from xdistill.training.losses import DistillationObjective

    return DistillationObjective(loss, student_dim=student_dim, teacher_dim=teacher_dim)


@dataclass
class TrainingRun:
    """What one training run works with (built once by :func:`prepare`)."""

    params: TrainParams
    runtime: RuntimeSettings
    outputs: OutputPaths
    ctx: DistContext
    student: SentenceTransformer
    objective: nn.Module
    module: DistillationModule
    train: TokenizedPairs
    validation: ValidationData
    featurize: Featurizer
    weights: DevScoreWeights
    fingerprint: str
    head_fit: str | None
    teacher_spec: str = ""  # the teacher the vectors come from (recorded with a teacher-space adapter)
    frozen_states: Any = None  # FrozenStates of train.student.cache_frozen (None: steps start from token ids)

    def step_features(self, pairs: Sequence[int] | np.ndarray) -> dict[str, torch.Tensor]:
        """A step's student inputs: the sources of ``pairs``, then their translations."""
        if self.frozen_states is not None:
            return self.frozen_states.features(pairs, self.ctx.device)
        return self.featurize([self.train.src[i] for i in pairs] + [self.train.tgt[i] for i in pairs])

    def measure(self) -> dict[str, float]:
        """The dev metrics of the student as it is now: measured by rank 0, the same on every process."""
        return self._on_main(
            lambda: validate(
                self.student,
                self.objective,
                self.featurize,
                self.validation,
                self.params.eval_batch_size,
                self.weights,
                self.params.dev_mining_threshold,
            )
        )

    def measure_rotated(self, before: dict[str, float]) -> dict[str, float]:
        """:meth:`measure` right after a rotation of the output, from the metrics ``before`` it (only what the
        rotation can change is measured again: :func:`xdistill.training.validation.validate_rotated`)."""
        return self._on_main(
            lambda: validate_rotated(
                before,
                self.student,
                self.objective,
                self.featurize,
                self.validation,
                self.params.eval_batch_size,
                self.weights,
            )
        )

    def _on_main(self, measure: Callable[[], dict[str, float]]) -> dict[str, float]:
        """``measure()`` run by rank 0 and its result sent to every process."""
        return self.ctx.broadcast(measure() if self.ctx.is_main else None) or {}

    def frozen_cache_report(self) -> dict[str, float] | None:
        """train.student.cache_frozen: the states' size and the pass's time (None when off)."""
        return self.frozen_states.summary() if self.frozen_states is not None else None


def prepare(
    inputs: TrainInputs, params: TrainParams, outputs: OutputPaths, runtime: RuntimeSettings, ctx: DistContext
) -> TrainingRun:
    """Load data, teacher vectors and the student; tokenise everything once."""
    from xdistill.models import default_prompt
    from xdistill.teacher.store import TeacherStore

    if runtime.threads:
        torch.set_num_threads(runtime.threads)
    if ctx.device.type == "cuda" and params.precision != "fp32":
        # the steps are mixed precision anyway: TF32 for what autocast leaves in fp32; an fp32 run stays exact
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    params.check_world_size(ctx.world_size)
    dev_mining = inputs.dev_mining
    _log_cpu_autocast(params, ctx)
    store = TeacherStore.open(inputs.teacher_dir, teacher_spec=inputs.teacher_spec, precision=inputs.teacher_precision)
    store.verify()  # damaged vectors would train towards other sentences' targets without a word
    train_pairs = read_parallel_pairs(inputs.train_file).spread(params.train_max_pairs)
    dev_pairs = read_parallel_pairs(inputs.dev_file).spread(params.dev_max_pairs)
    if len(train_pairs) < params.micro_batch:
        raise XdistillError(
            f"{inputs.train_file}: {len(train_pairs)} pairs, fewer than one batch of {params.micro_batch}"
        )

    student_config = StudentConfig.from_params(inputs.student_spec, params.student, params.max_seq_length)
    ckpt.seed_everything(params.seed)
    student = build_student(
        student_config,
        device=ctx.device,
        seed=params.seed,
        teacher_dim=store.dimension,
        parallel_files=(inputs.train_file, inputs.dev_file, *([dev_mining] if dev_mining else [])),
        raw_dir=inputs.raw_dir,
    )
    if params.interpolation and params.interpolation_from == "untrained":
        from xdistill.training.interpolation import check_identity_head

        check_identity_head(student)
    prompt = default_prompt(student)
    student_dim = student.get_embedding_dimension()
    assert student_dim is not None  # a built student ends in Pooling or its Dense head, which fix its dimension
    objective = build_objective(params.loss, student_dim, store.dimension).to(ctx.device)
    sts_languages = sorted(set(dev_pairs.langs) - {""})
    fingerprint = fingerprint_of_run(inputs, params, student_config, student, store, ctx, sts_languages)
    logger.info(
        "tokenising %d train and %d dev pairs (prompt %r, max %d tokens)",
        len(train_pairs),
        len(dev_pairs),
        prompt,
        params.max_seq_length,
    )
    train = _tokenize_train(train_pairs, student, prompt, params.max_seq_length, store, ctx, student_config)
    validation = _validation_data(inputs, params, student, prompt, dev_pairs, sts_languages, store)
    featurize = Featurizer(student, ctx.device)
    frozen_states, cached_layers = None, 0
    if student_config.cache_frozen:
        from xdistill.training.frozen_cache import compute_frozen_states

        cached_layers = student_config.freeze_layers
        frozen_states = compute_frozen_states(student, featurize, train, cached_layers, params.eval_batch_size)
    return TrainingRun(
        params,
        runtime,
        outputs,
        ctx,
        student,
        objective,
        DistillationModule(student, objective, cached_layers),
        train,
        validation,
        featurize,
        DevScoreWeights.from_params(params.dev_score_weights),
        fingerprint,
        student_config.head_fit if student_config.align_to_teacher else None,
        inputs.teacher_spec or store.teacher_spec,
        frozen_states,
    )


def _tokenize_train(
    pairs: ParallelPairs,
    student: SentenceTransformer,
    prompt: str,
    max_length: int,
    store: TeacherStore,
    ctx: DistContext,
    student_config: StudentConfig,
) -> TokenizedPairs:
    """The training pairs, tokenised once up front; in a multi-process run each process measures the lengths of
    its share and tokenises only what its slices need, when they need it (cached frozen states need every text)."""
    if ctx.distributed and not student_config.cache_frozen:
        from xdistill.training.tokenized import tokenize_pairs_lazily

        return tokenize_pairs_lazily(
            pairs, student, prompt, max_length, store, ctx.rank, ctx.world_size, ctx.gather_objects
        )
    return tokenize_pairs(pairs, student, prompt, max_length, store, lazy_teacher=True)


def _log_cpu_autocast(params: TrainParams, ctx: DistContext) -> None:
    """Warn that bf16 steps on a CPU without bf16 instructions are emulated (slower than fp32 ones)."""
    if ctx.device.type == "cpu" and params.precision == "bf16" and not cpu_has_native_bf16():
        logger.warning(
            "train.precision is bf16, but this CPU has no bf16 instructions: its bf16 steps are emulated, "
            "slower than fp32 ones"
        )


def fingerprint_of_run(
    inputs: TrainInputs,
    params: TrainParams,
    student_config: StudentConfig,
    student: SentenceTransformer,
    store: TeacherStore,
    ctx: DistContext,
    sts_languages: list[str],
) -> str:
    """Everything a checkpoint's weights depend on: a finished run's last.pt is reused as the result
    (persisted across `dvc repro`), so new code, new student weights or new dev data must not match it."""
    from xdistill.imports import code_digest
    from xdistill.models import model_fingerprint

    dev_mining = inputs.dev_mining
    return ckpt.run_fingerprint(
        {
            "params": params.loop_settings(),
            "student": student_config.as_dict(),
            "student_weights": model_fingerprint(inputs.student_spec),
            "code": code_digest(TRAINER_MODULE),
            "teacher": store.teacher_id,
            "teacher_vectors": store.content_digest,  # vectors changed under a last.pt: not its run any more
            "train": ckpt.file_digest(inputs.train_file),
            "dev": ckpt.file_digest(inputs.dev_file),
            "dev_sts": [sts_dev_digests(inputs.dev_sts_dir, sts_languages), sts_languages],
            "dev_mining": ckpt.file_digest(dev_mining) if dev_mining else None,
            # the device type and precision are params (in loop_settings); the process count is placement, but
            # the RNG streams of dropout are per process, so a last.pt resumes with the same count only
            "world_size": ctx.world_size,
            # a trimmed vocabulary follows its corpus (the evaluation sets too): rows of another one mean other pieces
            "vocabulary": vocabulary_digest(student) if student_config.vocabulary else None,
        }
    )


def _validation_data(
    inputs: TrainInputs,
    params: TrainParams,
    student: SentenceTransformer,
    prompt: str,
    dev_pairs: ParallelPairs,
    sts_languages: list[str],
    store: TeacherStore,
) -> ValidationData:
    """The dev pairs, STS dev sets and dev mining blocks, tokenised; logs what validation will see."""
    # dev data is embedded as users embed: whole inputs up to the student's own limit
    eval_length = student.max_seq_length or params.max_seq_length
    validation = ValidationData(
        tokenize_pairs(dev_pairs, student, prompt, eval_length, store),
        load_sts_dev(
            inputs.dev_sts_dir, sts_languages, student.tokenizer, prompt, eval_length, params.dev_sts_max_pairs
        ),
        load_mining_blocks(inputs.dev_mining_file, student.tokenizer, prompt, eval_length),
    )
    logger.info(
        "validation: %d dev pairs, %d STS dev sets (%s), dev mining blocks: %s",
        len(validation.pairs),
        len(validation.sts),
        ", ".join(s.name for s in validation.sts) or "none",
        ", ".join(f"{b.lang} {len(b.src)}" for b in validation.mining_blocks) or "none",
    )
    return validation
