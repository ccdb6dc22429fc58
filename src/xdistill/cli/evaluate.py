"""``xdistill evaluate``: the ``baselines`` (``--baselines``) and ``evaluate`` DVC stages.

``xdistill evaluate --baselines`` evaluates the teacher, the untrained student and mUSE into
``data/baselines/<label>.json``; ``xdistill evaluate --start`` evaluates the student as training
started (``models/student_start``: the untrained student with its head fitted to the teacher)
into ``data/start_baseline/``; ``xdistill evaluate`` evaluates the trained student
(``models/student``) and writes ``metrics/eval``, ``reports/eval`` and ``plots/eval`` with the
baselines side by side. Reads params ``languages``, ``models`` and ``evaluate``.
"""

from __future__ import annotations

from pathlib import Path

import click

from xdistill.errors import XdistillError
from xdistill.io import PARAMS_FILE, load_params

DEFAULT_STUDENT = "models/student"
DEFAULT_START = "models/student_start"


@click.command()
@click.option(
    "--baselines",
    "baselines",
    is_flag=True,
    help="evaluate the reference models (teacher, untrained student, mUSE) into --baselines-dir",
)
@click.option(
    "--start", "start", is_flag=True, help="evaluate the student as training started (--student-start) into --start-dir"
)
@click.option("--params", default=PARAMS_FILE, show_default=True, help="params file")
@click.option("--raw-dir", default="data/raw", show_default=True, help="staged corpora holding eval/")
@click.option("--dev", default="data/parallel/dev.tsv.gz", show_default=True, help="held-out dev pairs (gzipped TSV)")
@click.option("--student", default=DEFAULT_STUDENT, show_default=True, help="trained student model folder or spec")
@click.option(
    "--student-start",
    default=DEFAULT_START,
    show_default=True,
    help="the student as training started: the untrained student with its head fitted to the teacher",
)
@click.option(
    "--start-adapter",
    default="models/student_start_adapter",
    show_default=True,
    help="folder with the starting student's teacher-space adapter (the start_adapter stage's)",
)
@click.option(
    "--start-dir",
    default="data/start_baseline",
    show_default=True,
    help="where --start writes its result; read beside --baselines-dir when it exists",
)
@click.option("--baselines-dir", default="data/baselines", show_default=True)
@click.option("--metrics-dir", default="metrics/eval", show_default=True)
@click.option(
    "--scores",
    default="metrics/scores.json",
    show_default=True,
    help="the student's headline scores, a few short columns (the stage's DVC metrics)",
)
@click.option("--reports-dir", default="reports/eval", show_default=True)
@click.option("--plots-dir", default="plots/eval", show_default=True)
def command(
    baselines: bool,
    start: bool,
    params: str,
    raw_dir: str,
    dev: str,
    student: str,
    student_start: str,
    start_adapter: str,
    start_dir: str,
    baselines_dir: str,
    metrics_dir: str,
    scores: str,
    reports_dir: str,
    plots_dir: str,
) -> int:
    """Evaluate the trained student (--baselines: the reference models; --start: the starting student)."""
    from xdistill.data.languages import check_languages
    from xdistill.evaluation.pipeline import run_baselines, run_start_evaluation, run_student_evaluation
    from xdistill.evaluation.report import headline_scores
    from xdistill.evaluation.settings import EvaluationSettings
    from xdistill.io import write_json_atomic

    all_params = load_params(None, params)
    languages = check_languages(all_params.get("languages"), params)
    settings = EvaluationSettings.from_params(all_params.get("evaluate"), languages)
    models = all_params.get("models") or {}
    if baselines and start:
        raise click.UsageError("--baselines and --start are two stages: give one of them")
    if baselines:
        results = run_baselines(settings, models, raw_dir, dev, baselines_dir)
        click.echo(f"baselines written to {baselines_dir}: {', '.join(results)}")
        return 0
    if not models.get("teacher"):
        raise XdistillError(f"{params}: models.teacher is not set (the dev MSE compares with the teacher)")
    if start:
        if not Path(student_start).exists():
            raise XdistillError(f"{student_start}: starting student not found (run the `train` stage first)")
        adapter = start_adapter if Path(start_adapter).is_dir() else None
        if adapter is None:
            click.echo(
                f"warning: {start_adapter} not found: the starting student is scored without a "
                "teacher-space adapter (run `xdistill start-adapter` first)",
                err=True,
            )
        reuse = baselines_dir if Path(baselines_dir).is_dir() else None
        run_start_evaluation(settings, student_start, models["teacher"], raw_dir, dev, start_dir, adapter, reuse)
        click.echo(f"starting student evaluated into {start_dir}")
        return 0
    if student == DEFAULT_STUDENT and not Path(DEFAULT_STUDENT).is_dir():
        raise XdistillError(f"{DEFAULT_STUDENT}: trained student not found (run the `train` stage first)")
    folders = [baselines_dir] + ([start_dir] if Path(start_dir).is_dir() else [])
    summary = run_student_evaluation(
        settings, student, models["teacher"], raw_dir, dev, folders, metrics_dir, reports_dir, plots_dir
    )
    write_json_atomic(scores, headline_scores(summary))
    click.echo(f"primary score (student): {summary.get('primary_score')}; reports in {reports_dir}")
    return 0
