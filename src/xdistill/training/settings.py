"""What a training run is told: the ``train`` and ``runtime`` params sections and where it writes.

:class:`TrainParams` is the ``train`` section (params.yaml documents every key); it shapes the
result, so the ``train`` stage lists it as a DVC parameter. :class:`RuntimeSettings` is the
``runtime`` section, how a run executes without changing what it produces (threads, progress
interval), so no stage depends on it. :class:`OutputPaths` are the stage's outputs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from xdistill.config import SECTION_CONFIG, Count, NonNegativeFloat, NonNegativeInt, PositiveFloat, parse_section
from xdistill.errors import XdistillError
from xdistill.training.losses import LossConfig
from xdistill.training.validation import DEV_MINING_THRESHOLDS, SELECTION_METRICS, DevScoreWeights

# Keys that act only after the training loop, on the student it chose (what is exported): a finished
# run's checkpoints stay valid when they change, so they stay out of the checkpoint fingerprint.
EXPORT_ONLY_PARAMS = frozenset(
    {"interpolation", "interpolation_from", "interpolation_tolerance", "export_rotation", "teacher_adapter"}
)


@dataclass
class TrainParams:
    """The ``train`` section of params.yaml (see the comments there)."""

    seed: int = 42
    steps: Count = 200
    batch_size: Count = 32
    grad_accumulation: Count = 1
    learning_rate: PositiveFloat = 5e-5
    weight_decay: NonNegativeFloat = 0.01
    warmup_ratio: Annotated[float, Field(ge=0, lt=1)] = 0.1
    max_grad_norm: PositiveFloat = 1.0  # clipping to norm 0 would zero every gradient
    max_seq_length: Count = 64  # also within the student's positions (checked when it loads)
    device: str = "cpu"  # the kind of device that trains: cpu or cuda (which GPUs, and how many: runtime)
    precision: str = "fp32"  # autocast of the training steps: fp32, bf16 or fp16 (cuda, with a gradient scaler)
    eval_every: Count = 50
    checkpoint_every: Count = 50
    early_stopping_patience: Count | None = 3  # 0 would stop at the first evaluation even when it improved
    selection_metric: str = "dev_score"
    dev_score_weights: dict[str, float] = field(default_factory=dict)
    dev_mining_threshold: str = "oracle"  # "oracle" | "transfer" (validation.dev_mining_f1)
    interpolation: list[float] | None = None
    interpolation_from: str = "start"  # "start": the student as training started; "untrained": the untrained student
    interpolation_tolerance: NonNegativeFloat = (
        0.0  # export the smallest a within this much of the best (interpolation.py)
    )
    export_rotation: bool = False  # rotate the exported student onto the teacher's space (alignment.py)
    teacher_adapter: dict[str, Any] = field(default_factory=dict)  # a teacher-space output (adapter/fit.py)
    # above 1 the guard could never fire (a cosine is at most 1)
    collapse_threshold: Annotated[float, Field(gt=0, lt=1)] = 0.95
    train_max_pairs: Count | None = None
    dev_max_pairs: Count | None = 500
    dev_sts_max_pairs: NonNegativeInt | None = 300
    eval_batch_size: Count = 128
    align_pairs: Count = 4096  # pairs used to fit the head (student.align_to_teacher)
    student: dict[str, Any] = field(default_factory=dict)
    loss: dict[str, Any] = field(default_factory=lambda: {"mse": 1.0})

    __pydantic_config__ = SECTION_CONFIG

    @classmethod
    def from_params(cls, section: dict[str, Any] | None) -> TrainParams:
        moved = sorted(set(section or {}) & {"threads", "log_every"})
        if moved:
            raise XdistillError(
                f"params train: {', '.join(moved)} moved to the runtime section (how a run executes, "
                "not what it produces, so no stage depends on it)"
            )
        if section and "autocast_bf16" in section:
            raise XdistillError(
                "params train.autocast_bf16 is now train.precision (fp32, bf16 or fp16) with train.device "
                "(cpu or cuda): the old value cuda is precision bf16 with device cuda, always is bf16, never is fp32"
            )
        return parse_section(cls, section, "train")

    def _check_placement(self) -> None:
        from xdistill.training.tokenized import DEVICE_TYPES, PRECISIONS

        if self.device not in DEVICE_TYPES:
            raise XdistillError(f"params train.device must be one of {', '.join(DEVICE_TYPES)}, got {self.device!r}")
        if self.precision not in PRECISIONS:
            raise XdistillError(
                f"params train.precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}"
            )
        if self.precision == "fp16" and self.device != "cuda":
            raise XdistillError("params train.precision fp16 needs train.device cuda (use bf16 or fp32 on a CPU)")

    def __post_init__(self) -> None:
        if self.batch_size % self.grad_accumulation:
            raise XdistillError(
                f"params train: batch_size {self.batch_size} is not a multiple of grad_accumulation "
                f"{self.grad_accumulation}"
            )
        LossConfig.from_mapping(self.loss)  # the weights too, before the data and the model are loaded
        if self.selection_metric not in SELECTION_METRICS:
            raise XdistillError(f"params train.selection_metric must be one of {sorted(SELECTION_METRICS)}")
        self._check_placement()
        if self.selection_metric == "dev_sts" and self.dev_sts_max_pairs == 0:
            raise XdistillError("params train.selection_metric dev_sts needs STS dev pairs (dev_sts_max_pairs is 0)")
        DevScoreWeights.from_params(self.dev_score_weights)
        if self.dev_mining_threshold not in DEV_MINING_THRESHOLDS:
            raise XdistillError(
                f"params train.dev_mining_threshold must be one of {', '.join(DEV_MINING_THRESHOLDS)}, "
                f"got {self.dev_mining_threshold!r}"
            )
        if self.interpolation is not None:
            from xdistill.training.interpolation import check_alphas

            check_alphas(self.interpolation)
        from xdistill.adapter.fit import AdapterSettings

        AdapterSettings.from_params(self.teacher_adapter)
        if self.interpolation_from not in ("start", "untrained"):
            raise XdistillError(
                f"params train.interpolation_from must be start or untrained, got {self.interpolation_from!r}"
            )

    def loop_settings(self) -> dict[str, Any]:
        """Every key but :data:`EXPORT_ONLY_PARAMS`: what the checkpoints of a run depend on."""
        return {k: v for k, v in asdict(self).items() if k not in EXPORT_ONLY_PARAMS}

    @property
    def micro_batch(self) -> int:
        """Pairs per forward pass, summed over all processes."""
        return self.batch_size // self.grad_accumulation

    def check_world_size(self, world_size: int) -> None:
        """Refuse a micro-batch ``world_size`` processes cannot share: one that does not split evenly, or in-batch
        losses over a micro-batch of one pair. Each process embeds its own slice of each micro-batch and the
        in-batch losses see the whole micro-batch (gathered from every process): with one pair there is no
        other pair to rank against, and the ranking and logit losses are exactly 0 (a silent no-op)."""
        if self.micro_batch % world_size:
            raise XdistillError(
                f"params train: a micro-batch of {self.micro_batch} pairs does not split evenly over "
                f"{world_size} processes"
            )
        in_batch = LossConfig.from_mapping(self.loss).in_batch
        if in_batch and self.micro_batch < 2:
            raise XdistillError(
                f"params train: {', '.join(in_batch)} compare each pair with the other pairs of its micro-batch, "
                f"but a micro-batch holds {self.micro_batch} pair (batch_size {self.batch_size} / grad_accumulation "
                f"{self.grad_accumulation}): raise batch_size or lower grad_accumulation"
            )


@dataclass(frozen=True)
class RuntimeSettings:
    """How a run executes without changing its result (params.yaml ``runtime``, not a DVC param).

    ``nproc`` training processes per host (``auto``: one per visible GPU when ``train.device`` is cuda, one
    on a CPU) on ``nnodes`` hosts that meet at the c10d rendezvous ``rdzv_endpoint`` (``host:port``; empty on
    one host); :mod:`xdistill.training.launch` starts them. ``loader_workers`` processes prepare the next
    micro-batches (0: the training process does), into pinned memory with ``pin_memory`` (GPU runs).
    """

    __pydantic_config__ = SECTION_CONFIG

    threads: int | None = None  # torch CPU threads (None: torch's default)
    log_every: int = 10  # progress line every N steps
    nproc: int | Literal["auto"] = 1  # training processes per host: a number, or "auto"
    nnodes: int = 1  # hosts in the job
    rdzv_endpoint: str = ""  # host:port of the c10d rendezvous ("" = this host alone)
    rdzv_id: str = "xdistill"  # the job's name at the rendezvous (a new job per run when several share one)
    max_restarts: int = 0  # times the launcher restarts a job whose process failed (it resumes from last.pt)
    loader_workers: int = 0
    pin_memory: bool = False

    @classmethod
    def from_params(cls, section: dict[str, Any] | None) -> RuntimeSettings:
        return parse_section(cls, section, "runtime")

    def __post_init__(self) -> None:
        if self.log_every < 1 or (self.threads is not None and self.threads < 1):
            raise XdistillError(f"params runtime: log_every and threads must be >= 1, got {self}")
        if not (self.nproc == "auto" or (isinstance(self.nproc, int) and self.nproc >= 1)):
            raise XdistillError(f"params runtime.nproc must be auto or a number >= 1, got {self.nproc!r}")
        if self.nnodes < 1 or min(self.loader_workers, self.max_restarts) < 0:
            raise XdistillError(
                "params runtime: nnodes must be >= 1, loader_workers and max_restarts >= 0, got "
                f"{self.nnodes}, {self.loader_workers}, {self.max_restarts}"
            )
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise XdistillError(
                f"params runtime.nnodes is {self.nnodes}: the hosts meet at runtime.rdzv_endpoint (host:port of "
                "the first host), which is not set"
            )
        if self.rdzv_endpoint and ":" not in self.rdzv_endpoint:
            raise XdistillError(f"params runtime.rdzv_endpoint must be host:port, got {self.rdzv_endpoint!r}")


@dataclass
class OutputPaths:
    """Where the stage writes (defaults are the DVC outputs)."""

    model_dir: Path = Path("models/student")
    checkpoint_dir: Path = Path("data/checkpoints")
    metrics: Path | None = Path("metrics/train.json")
    history_csv: Path | None = Path("reports/train_history.csv")
    plot: Path | None = Path("plots/train_curves.png")
    # the student as training started (untrained student + fitted head): interpolation's a = 0 and the
    # "untrained, in the teacher's space" reference of the evaluation; None = not written
    start_dir: Path | None = None

    def __post_init__(self) -> None:
        for name in ("model_dir", "checkpoint_dir", "metrics", "history_csv", "plot", "start_dir"):
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, Path(value))
