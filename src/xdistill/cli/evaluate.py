"""``xdistill evaluate``: the ``baselines`` (``--baselines``) and ``evaluate`` DVC stages.

``xdistill evaluate --baselines`` evaluates the teacher, the untrained student and mUSE into
``data/baselines/<label>.json``; ``xdistill evaluate --start`` evaluates the student as training
started (``models/student_start``: the untrained student with its head fitted to the teacher)
into ``data/start_baseline/``; ``xdistill evaluate`` evaluates the trained student
(``models/student``) and writes ``metrics/eval``, ``reports/eval`` and ``plots/eval`` with the
baselines side by side. Reads params ``languages``, ``models`` and ``evaluate``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from xdistill.errors import XdistillError
from xdistill.io import load_params

DEFAULT_STUDENT = "models/student"
DEFAULT_START = "models/student_start"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--baselines", action="store_true",
                        help="evaluate the reference models (teacher, untrained student, mUSE) into --baselines-dir")
    parser.add_argument("--params", default="params.yaml", help="params file (default: params.yaml)")
    parser.add_argument("--raw-dir", default="data/raw", help="staged corpora holding eval/ (default: data/raw)")
    parser.add_argument("--dev", default="data/parallel/dev.tsv.gz", help="held-out dev pairs (gzipped TSV)")
    parser.add_argument("--student", default=DEFAULT_STUDENT, help="trained student model folder or spec")
    parser.add_argument("--start", action="store_true",
                        help="evaluate the student as training started (--student-start) into --start-dir")
    parser.add_argument("--student-start", default=DEFAULT_START,
                        help="the student as training started: the untrained student with its head fitted to the teacher")
    parser.add_argument("--start-dir", default="data/start_baseline",
                        help="where --start writes its result; read beside --baselines-dir when it exists")
    parser.add_argument("--baselines-dir", default="data/baselines")
    parser.add_argument("--metrics-dir", default="metrics/eval")
    parser.add_argument("--reports-dir", default="reports/eval")
    parser.add_argument("--plots-dir", default="plots/eval")


def run(args: argparse.Namespace) -> int:
    from xdistill.evaluation.pipeline import run_baselines, run_start_evaluation, run_student_evaluation
    from xdistill.evaluation.suite import EvaluationSettings

    params = load_params(None, args.params)
    settings = EvaluationSettings.from_params(params.get("evaluate"), params.get("languages") or [])
    models = params.get("models") or {}
    if args.baselines:
        results = run_baselines(settings, models, args.raw_dir, args.dev, args.baselines_dir)
        print(f"baselines written to {args.baselines_dir}: {', '.join(results)}")
        return 0
    if not models.get("teacher"):
        raise XdistillError(f"{args.params}: models.teacher is not set (the dev MSE compares with the teacher)")
    if args.start:
        if not Path(args.student_start).exists():
            raise XdistillError(f"{args.student_start}: starting student not found (run the `train` stage first)")
        run_start_evaluation(settings, args.student_start, models["teacher"], args.raw_dir, args.dev, args.start_dir)
        print(f"starting student evaluated into {args.start_dir}")
        return 0
    if args.student == DEFAULT_STUDENT and not Path(DEFAULT_STUDENT).is_dir():
        raise XdistillError(f"{DEFAULT_STUDENT}: trained student not found (run the `train` stage first)")
    baselines = [args.baselines_dir] + ([args.start_dir] if Path(args.start_dir).is_dir() else [])
    summary = run_student_evaluation(settings, args.student, models["teacher"], args.raw_dir, args.dev,
                                     baselines, args.metrics_dir, args.reports_dir, args.plots_dir)
    print(f"primary score (student): {summary.get('primary_score')}; reports in {args.reports_dir}")
    return 0
