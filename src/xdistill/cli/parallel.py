"""``xdistill parallel``: the DVC ``parallel`` stage.

Reads the sources in ``parallel.sources`` from ``data/raw`` for the shared ``languages``, cleans and
decontaminates them, and writes ``data/parallel/{train,dev}.tsv.gz`` plus the data report
(``metrics/data_report.json``, ``reports/data_report.md``, ``plots/data_report.png``); see
:func:`xdistill.data.parallel.build_parallel`.
"""

from __future__ import annotations

import argparse

from xdistill.io import PARAMS_FILE, load_params


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", default=PARAMS_FILE, help="params file (default: %(default)s)")
    parser.add_argument("--raw", default="data/raw", help="raw corpora folder (default: %(default)s)")
    parser.add_argument("--out", default="data/parallel", help="output folder (default: %(default)s)")
    parser.add_argument("--metrics", default="metrics/data_report.json")
    parser.add_argument("--report", default="reports/data_report.md")
    parser.add_argument("--plot", default="plots/data_report.png")


def run(args: argparse.Namespace) -> int:
    from xdistill.data.parallel import build_parallel

    params = load_params(path=args.params)
    report = build_parallel(
        args.raw,
        languages=list(params.get("languages") or []),
        params=params.get("parallel") or {},
        train_path=f"{args.out}/train.tsv.gz",
        dev_path=f"{args.out}/dev.tsv.gz",
        metrics_path=args.metrics,
        markdown_path=args.report,
        plot_path=args.plot,
    )
    totals = report["totals"]
    print(
        f"{args.out}: {totals['train']} train / {totals['dev']} dev pairs "
        f"({totals['read']} read, {totals['malformed_rows']} malformed rows skipped)"
    )
    return 0
