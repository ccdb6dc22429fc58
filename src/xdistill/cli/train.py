"""``xdistill train``: the DVC ``train`` stage (see :func:`xdistill.training.trainer.train_student`).

Reads params ``train``, ``models.student`` and ``models.teacher`` (to pick the teacher's vectors
in the store), and ``runtime`` (threads, progress interval: how it runs, not what it produces, so
it is no DVC parameter of the stage). Run it under ``torchrun --nproc-per-node N -m xdistill.cli.main train`` (or
``torchrun ... $(which xdistill) train``) for DistributedDataParallel training.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from xdistill.io import PARAMS_FILE, load_params

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", default=PARAMS_FILE, help="params file (default: %(default)s)")
    parser.add_argument("--train", default="data/parallel/train.tsv.gz", help="training pairs")
    parser.add_argument("--dev", default="data/parallel/dev.tsv.gz", help="dev pairs")
    parser.add_argument("--teacher-dir", default="data/teacher", help="teacher embedding store")
    parser.add_argument("--dev-sts", default="data/raw/eval/stsb-multi-mt",
                        help="stsb-multi-mt folder whose dev split validates checkpoints ('' = none)")
    parser.add_argument("--output", default="models/student", help="student model folder to write")
    parser.add_argument("--start-output", default="models/student_start",
                        help="folder for the student as training started (base + fitted head; '' = none)")
    parser.add_argument("--checkpoints", default="data/checkpoints", help="checkpoint folder (resume)")
    parser.add_argument("--metrics", default="metrics/train.json")
    parser.add_argument("--history", default="reports/train_history.csv")
    parser.add_argument("--plot", default="plots/train_curves.png")
    parser.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda when present)")


def run(args: argparse.Namespace) -> int:
    from xdistill.training.trainer import OutputPaths, RuntimeSettings, TrainParams, train_student

    params = TrainParams.from_params(load_params("train", args.params))
    runtime = RuntimeSettings(**(load_params(None, args.params).get("runtime") or {}))
    models = load_params("models", args.params)
    outputs = OutputPaths(
        model_dir=Path(args.output),
        checkpoint_dir=Path(args.checkpoints),
        metrics=Path(args.metrics),
        history_csv=Path(args.history),
        plot=Path(args.plot),
        start_dir=Path(args.start_output) if args.start_output else None,
    )
    result = train_student(
        args.train, args.dev, args.teacher_dir, models["student"], params, outputs,
        teacher_spec=models.get("teacher"), device=args.device, dev_sts_dir=args.dev_sts or None, runtime=runtime,
    )
    exported = result.interpolation["selected"] if result.interpolation else result.best
    logger.info(
        "trained %d steps (best step %d): dev score %.2f -> %.2f (exported%s); student in %s",
        result.steps_completed, result.best_step, result.initial.get("dev_score", float("nan")),
        exported.get("dev_score", float("nan")),
        f", interpolation a={result.interpolation['alpha']:g}" if result.interpolation else "", result.output_dir,
    )
    return 0
