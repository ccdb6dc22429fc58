"""One small training run through the trainer's public API, for the GPU check.

``python -m bench.perf.gpu_train RUN.json`` calls :func:`xdistill.training.trainer.train_student` with the
arguments in ``RUN.json`` (see :func:`run_from_file`) and writes what it did next to it
(``RUN.result.json``). The DDP smoke test of ``tests/test_gpu.py`` starts it under
``python -m torch.distributed.run --nproc-per-node 1``, so the whole process-group path (NCCL on a GPU)
runs, and reads the result's ``world_size`` to see that it did.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

# params.yaml's student options that shape a step: the word-embedding table frozen, and a Dense head to
# the teacher's dimension (384 -> 768 for mE5-small under mpnet) fitted before the first step
STUDENT_OPTIONS = {"freeze_word_embeddings": True, "align_to_teacher": True}


def train_params(*, device: str, precision: str, steps: int, batch_size: int, max_seq_length: int) -> dict[str, Any]:
    """A ``train`` section that times or smoke-tests the steps: no validation or checkpoint inside the run."""
    return {
        "seed": 1,
        "steps": steps,
        "batch_size": batch_size,
        "learning_rate": 5e-5,
        "warmup_ratio": 0.1,
        "max_seq_length": max_seq_length,
        "eval_every": 10**6,
        "checkpoint_every": 10**6,
        "early_stopping_patience": None,
        "dev_max_pairs": 16,
        "student": STUDENT_OPTIONS,
        "loss": {"mse": 1.0},
        "device": device,
        "precision": precision,
    }


def run_training(
    workdir: Path,
    train: Path,
    dev: Path,
    store: Path,
    teacher_spec: str,
    student_spec: str,
    params: dict[str, Any],
) -> dict[str, Any]:
    """Train into ``workdir/<name>``; what the run reports (its throughput, its losses, where the student is)."""
    from xdistill.training.settings import OutputPaths, RuntimeSettings
    from xdistill.training.trainer import train_student

    result = train_student(
        train,
        dev,
        store,
        student_spec,
        params,
        OutputPaths(workdir / "student", workdir / "checkpoints", None, None, None),
        teacher_spec=teacher_spec,
        runtime=RuntimeSettings(log_every=max(1, params["steps"] // 4)),
        raw_dir=None,
    )
    losses = [float(row["loss"]) for row in result.history if row.get("kind") == "train" and "loss" in row]
    return {
        "pairs_per_second": result.pairs_per_second,
        "train_seconds": result.train_seconds,
        "steps": result.steps_completed,
        "losses": losses,
        "finite": bool(losses) and all(math.isfinite(loss) for loss in losses),
        "student": str(result.output_dir),
        "world_size": int(os.environ.get("WORLD_SIZE", "1")),
    }


def run_from_file(config_path: Path) -> Path:
    """Run the training ``config_path`` describes (``workdir, train, dev, store, teacher_spec, student_spec,
    params``); rank 0 writes the result beside it and returns its path."""
    config = json.loads(config_path.read_text(encoding="utf-8"))
    paths = {key: Path(config[key]) for key in ("workdir", "train", "dev", "store")}
    result = run_training(
        paths["workdir"],
        paths["train"],
        paths["dev"],
        paths["store"],
        config["teacher_spec"],
        config["student_spec"],
        config["params"],
    )
    out = config_path.with_suffix(".result.json")
    if int(os.environ.get("RANK", "0")) == 0:
        out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.perf.gpu_train RUN.json", file=sys.stderr)
        return 2
    print(f"wrote {run_from_file(Path(args[0]))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
