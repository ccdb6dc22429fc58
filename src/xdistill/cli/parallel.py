"""``xdistill parallel``: the DVC ``parallel`` stage.

Reads the sources in ``parallel.sources`` from ``data/raw`` for the shared ``languages``, cleans and
decontaminates them, and writes ``data/parallel/{train,dev,dev_mining}.tsv.gz`` plus the data report
(``metrics/data_report.json``, ``reports/data_report.md``, ``plots/data_report.png``); see
:func:`xdistill.data.parallel.build_parallel`.
"""

from __future__ import annotations

import click

from xdistill.io import PARAMS_FILE, load_params


@click.command()
@click.option("--params", default=PARAMS_FILE, show_default=True, help="params file")
@click.option("--raw", default="data/raw", show_default=True, help="raw corpora folder")
@click.option("--out", default="data/parallel", show_default=True, help="output folder")
@click.option("--metrics", default="metrics/data_report.json", show_default=True)
@click.option("--report", default="reports/data_report.md", show_default=True)
@click.option("--plot", default="plots/data_report.png", show_default=True)
def command(params: str, raw: str, out: str, metrics: str, report: str, plot: str) -> int:
    """Extract, clean and decontaminate the parallel sources into train/dev TSVs and the data report."""
    from xdistill.data.languages import check_languages
    from xdistill.data.parallel import build_parallel

    all_params = load_params(path=params)
    data_report = build_parallel(
        raw,
        languages=check_languages(all_params.get("languages"), params),
        params=all_params.get("parallel") or {},
        train_path=f"{out}/train.tsv.gz",
        dev_path=f"{out}/dev.tsv.gz",
        dev_mining_path=f"{out}/dev_mining.tsv.gz",
        metrics_path=metrics,
        markdown_path=report,
        plot_path=plot,
    )
    totals = data_report["totals"]
    click.echo(
        f"{out}: {totals['train']} train / {totals['dev']} dev / {totals['dev_mining']} dev mining pairs "
        f"({totals['read']} read, {totals['malformed_rows']} malformed rows skipped)"
    )
    return 0
