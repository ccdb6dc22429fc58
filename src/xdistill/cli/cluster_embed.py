"""``xdistill cluster-embed CORPUS... --teacher SPEC --store DIR``: teacher embedding on a Dask cluster.

Every distinct sentence of the corpus files gets its teacher vector in the store (the format the
``teacher_embed`` stage reads), encoded shard by shard on the workers; a run that stops resumes from
the shards already written (``--work-dir``, default ``<store>.shards``). A corpus file is a parallel
TSV (``*.tsv``, ``*.tsv.gz``: its source column, as the stage reads it) or a text file with one
sentence per line (blank lines skipped).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import click

from xdistill.cluster.settings import cluster_options
from xdistill.models.precision import PRECISIONS

logger = logging.getLogger(__name__)


@click.command()
@click.argument("corpus", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--teacher", required=True, help="teacher model spec (params.yaml models.teacher)")
@click.option(
    "--store",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("data/teacher"),
    show_default=True,
    help="teacher store folder",
)
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="shard files until the merge (default: <store>.shards); keep it to resume",
)
@click.option("--shard-rows", type=click.IntRange(min=1), default=10_000, show_default=True, help="sentences per task")
@click.option("--batch-size", type=click.IntRange(min=1), default=128, show_default=True, help="sentences per pass")
@click.option("--device", default=None, help="torch device of the workers (default: cuda where present)")
@click.option(
    "--precision", type=click.Choice(PRECISIONS), default="fp32", show_default=True, help="teacher number format"
)
@cluster_options
def command(corpus: tuple[Path, ...], **options: Any) -> int:
    """Embed every distinct sentence of the CORPUS files with the teacher, on a Dask cluster."""
    import functools

    from xdistill.cluster.embed import embed_on_cluster
    from xdistill.cluster.settings import ClusterSettings, dask_client

    settings = ClusterSettings(scheduler=options["scheduler"], workers=options["workers"])
    stats = embed_on_cluster(
        functools.partial(dask_client, settings),
        options["store"],
        options["teacher"],
        read_corpus(corpus),
        work_dir=options["work_dir"],
        shard_rows=options["shard_rows"],
        batch_size=options["batch_size"],
        device=options["device"],
        precision=options["precision"],
    )
    click.echo(f"{stats.n_requested} sentences: {stats.n_new} embedded now, {stats.n_cached} already in the store")
    return 0


def read_corpus(paths: tuple[Path, ...]) -> list[str]:
    """The sentences of the corpus files: a parallel TSV's sources, a text file's lines with text."""
    from xdistill.data.parallel_tsv import read_parallel_pairs
    from xdistill.mining.stream import LineFile, holds_text

    sentences: list[str] = []
    for path in paths:
        if path.name.endswith((".tsv", ".tsv.gz")):
            sentences.extend(read_parallel_pairs(path).sources)
        else:
            lines = LineFile(path)
            sentences.extend(text for batch in lines.batches(100_000) for text in batch if holds_text(text))
        logger.info("read %s: %d sentences so far", path, len(sentences))
    return sentences
