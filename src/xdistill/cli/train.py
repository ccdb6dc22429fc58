"""``xdistill train``: the DVC ``train`` stage (see :func:`xdistill.training.trainer.train_student`).

Reads params ``train``, ``models.student`` and ``models.teacher`` (to pick the teacher's vectors
in the store), and ``runtime`` (threads, progress, processes: how it runs, not what it produces, so
it is no DVC parameter of the stage). With ``runtime.nproc`` above 1 (or ``auto`` on a multi-GPU host) or
``runtime.nnodes`` above 1 it starts the training processes itself (:mod:`xdistill.training.launch`) and
they train with DistributedDataParallel; under ``torchrun`` it is one of them.
"""

from __future__ import annotations

import logging
from pathlib import Path

import click

from xdistill.errors import XdistillError
from xdistill.io import PARAMS_FILE, load_params

logger = logging.getLogger(__name__)


@click.command()
@click.option("--params", default=PARAMS_FILE, show_default=True, help="params file")
@click.option("--train", "train_file", default="data/parallel/train.tsv.gz", show_default=True, help="training pairs")
@click.option("--dev", "dev_file", default="data/parallel/dev.tsv.gz", show_default=True, help="dev pairs")
@click.option(
    "--dev-mining",
    default="data/parallel/dev_mining.tsv.gz",
    show_default=True,
    help="dev mining blocks (the parallel stage's; '' = pooled dev mining only)",
)
@click.option("--teacher-dir", default="data/teacher", show_default=True, help="teacher embedding store")
@click.option(
    "--dev-sts",
    default="data/raw/eval/stsb-multi-mt",
    show_default=True,
    help="stsb-multi-mt folder whose dev split validates checkpoints ('' = none)",
)
@click.option(
    "--raw",
    "raw_dir",
    default="data/raw",
    show_default=True,
    help="staged corpora: train.student.vocabulary corpus keeps the pieces of their evaluation sets ('' = none)",
)
@click.option("--output", default="models/student", show_default=True, help="student model folder to write")
@click.option(
    "--start-output",
    default="models/student_start",
    show_default=True,
    help="folder for the student as training started (base + fitted head; '' = none)",
)
@click.option("--checkpoints", default="data/checkpoints", show_default=True, help="checkpoint folder (resume)")
@click.option("--metrics", default="metrics/train.json", show_default=True)
@click.option("--history", default="reports/train_history.csv", show_default=True)
@click.option("--plot", default="plots/train_curves.png", show_default=True)
@click.option(
    "--device", default=None, help="cpu, cuda or cuda:N, of params train.device's type (default: train.device)"
)
@click.pass_context
def command(
    ctx: click.Context,
    params: str,
    train_file: str,
    dev_file: str,
    dev_mining: str,
    teacher_dir: str,
    dev_sts: str,
    raw_dir: str,
    output: str,
    start_output: str,
    checkpoints: str,
    metrics: str,
    history: str,
    plot: str,
    device: str | None,
) -> int:
    """Distill the student from the teacher's stored embeddings."""
    from xdistill.training.launch import launch, needs_launch
    from xdistill.training.settings import OutputPaths, RuntimeSettings, TrainParams
    from xdistill.training.trainer import train_student

    train_params = TrainParams.from_params(load_params("train", params))
    runtime = RuntimeSettings.from_params(load_params(None, params).get("runtime"))
    models = load_params("models", params) or {}
    if not models.get("student"):
        raise XdistillError(f"{params}: models.student is not set (the multilingual model to distil into)")
    check_dev_inputs(dev_mining, dev_sts)
    if needs_launch(runtime, train_params.device):
        launch(["train", *command_line(ctx)], runtime, train_params.device)
        return 0
    outputs = OutputPaths(
        model_dir=Path(output),
        checkpoint_dir=Path(checkpoints),
        metrics=Path(metrics),
        history_csv=Path(history),
        plot=Path(plot),
        start_dir=Path(start_output) if start_output else None,
    )
    result = train_student(
        train_file,
        dev_file,
        teacher_dir,
        models["student"],
        train_params,
        outputs,
        teacher_spec=models.get("teacher"),
        teacher_precision=(load_params(None, params).get("teacher_embed") or {}).get("precision", "fp32"),
        device=device,
        dev_sts_dir=dev_sts or None,
        runtime=runtime,
        dev_mining_file=dev_mining or None,
        raw_dir=raw_dir or None,
    )
    exported = result.interpolation["selected"] if result.interpolation else result.best
    logger.info(
        "trained %d steps (best step %d): dev score %.2f -> %.2f (exported%s); student in %s",
        result.steps_completed,
        result.best_step,
        result.start.get("dev_score", float("nan")),
        exported.get("dev_score", float("nan")),
        f", interpolation a={result.interpolation['alpha']:g}" if result.interpolation else "",
        result.output_dir,
    )
    return 0


def command_line(ctx: click.Context) -> list[str]:
    """This command's options as given (defaults spelled out), for the processes the launcher starts."""
    args: list[str] = []
    for parameter in ctx.command.params:
        value = ctx.params.get(parameter.name or "")
        if isinstance(parameter, click.Option) and value is not None:
            args += [parameter.opts[0], str(value)]
    return args


def check_dev_inputs(dev_mining: str, dev_sts: str) -> None:
    """Refuse a named dev mining file or STS folder that is not there: checkpoint selection without it
    would quietly pick a different student. '' turns either off."""
    if dev_mining and not Path(dev_mining).is_file():
        raise XdistillError(
            f"{dev_mining}: no dev mining file (the parallel stage writes it; "
            "--dev-mining '' selects checkpoints without dev mining)"
        )
    if dev_sts and not Path(dev_sts).is_dir():
        raise XdistillError(
            f"{dev_sts}: no stsb-multi-mt folder (the corpora stage stages it; "
            "--dev-sts '' selects checkpoints without dev STS)"
        )
