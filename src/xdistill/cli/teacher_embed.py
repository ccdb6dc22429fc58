"""``xdistill teacher-embed``: the DVC ``teacher_embed`` stage.

Embeds every distinct source sentence of the parallel train/dev files with the teacher
(``models.teacher``) into the fp16 store ``data/teacher/`` (see
:func:`xdistill.teacher.embed.build_teacher_store`). Sentences already stored for this
teacher are skipped, so re-runs after adding a language embed only the new sentences.
"""

from __future__ import annotations

from typing import Any

import click

from xdistill.io import PARAMS_FILE, load_params

DEFAULT_INPUTS = ("data/parallel/train.tsv.gz", "data/parallel/dev.tsv.gz")


def stage_params(params: str, teacher: str | None, batch_size: int | None, device: str | None) -> dict[str, Any]:
    """The ``teacher_embed`` section plus the teacher spec, with command-line overrides."""
    all_params = load_params(path=params)
    section = dict(all_params.get("teacher_embed") or {})
    section["teacher"] = teacher or (all_params.get("models") or {}).get("teacher")
    if batch_size is not None:
        section["batch_size"] = batch_size
    if device is not None:
        section["device"] = device
    return section


@click.command()
@click.option("--params", default=PARAMS_FILE, show_default=True, help="params file")
@click.option(
    "--input",
    "inputs",
    multiple=True,
    metavar="FILE",
    help=f"parallel file(s) to embed the source column of (repeatable; default: {' and '.join(DEFAULT_INPUTS)})",
)
@click.option("--store", default="data/teacher", show_default=True, help="teacher store folder")
@click.option("--teacher", default=None, help="override models.teacher (a model spec)")
@click.option("--batch-size", type=click.IntRange(min=1), default=None, help="override teacher_embed.batch_size")
@click.option("--device", default=None, help="override teacher_embed.device (cpu, cuda, ...)")
def command(
    params: str, inputs: tuple[str, ...], store: str, teacher: str | None, batch_size: int | None, device: str | None
) -> int:
    """Embed every distinct source sentence of the parallel files with the teacher (cached)."""
    from xdistill.teacher.embed import build_teacher_store

    stats = build_teacher_store(
        list(inputs or DEFAULT_INPUTS), store, stage_params(params, teacher, batch_size, device)
    )
    click.echo(
        f"teacher embeddings: {stats.n_requested} distinct source sentences, "
        f"{stats.n_new} embedded now, {stats.n_cached} already stored ({stats.seconds:.1f} s)"
    )
    return 0
