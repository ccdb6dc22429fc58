"""``xdistill start-adapter``: the DVC ``start_adapter`` stage (see
:func:`xdistill.adapter.start.fit_start_adapter`).

Reads params ``train.teacher_adapter``, ``train.train_max_pairs``, ``train.dev_max_pairs``,
``train.max_seq_length``, ``train.eval_batch_size`` (the stage's DVC params: nothing else of the
``train`` section changes its output), ``models.teacher``, and ``runtime.threads`` (how it runs, not
what it produces: no DVC parameter, as for ``train``).
"""

from __future__ import annotations

import click

from xdistill.io import PARAMS_FILE, load_params


@click.command()
@click.option("--params", default=PARAMS_FILE, show_default=True, help="params file")
@click.option(
    "--student-start",
    "start_dir",
    default="models/student_start",
    show_default=True,
    help="the student as training started (the train stage's)",
)
@click.option("--train", "train_file", default="data/parallel/train.tsv.gz", show_default=True, help="training pairs")
@click.option("--dev", "dev_file", default="data/parallel/dev.tsv.gz", show_default=True, help="dev pairs")
@click.option("--teacher-dir", default="data/teacher", show_default=True, help="teacher embedding store")
@click.option(
    "--output",
    default="models/student_start_adapter",
    show_default=True,
    help="folder to write (its teacher_space/ holds the adapter)",
)
@click.option("--device", default=None, help="cpu, cuda or cuda:N (default: params train.device)")
def command(
    params: str, start_dir: str, train_file: str, dev_file: str, teacher_dir: str, output: str, device: str | None
) -> int:
    """Fit the teacher-space adapter of the student as training started."""
    from xdistill.adapter.start import fit_start_adapter
    from xdistill.training.settings import RuntimeSettings, TrainParams

    train_params = TrainParams.from_params(load_params("train", params))
    runtime = RuntimeSettings.from_params(load_params(None, params).get("runtime"))
    models = load_params("models", params) or {}
    report = fit_start_adapter(
        start_dir,
        train_file,
        dev_file,
        teacher_dir,
        train_params,
        output,
        teacher_spec=models.get("teacher"),
        teacher_precision=(load_params(None, params).get("teacher_embed") or {}).get("precision", "fp32"),
        device=device,
        threads=runtime.threads,
    )
    if report is None:
        click.echo(f"train.teacher_adapter.pairs is 0: no adapter ({output} records it)")
    else:
        click.echo(
            f"adapter of {start_dir} in {output}: dev teacher-space accuracy {report['dev_teacher_accuracy']:.2f}"
        )
    return 0
