"""``xdistill corpora``: the DVC ``corpora`` stage.

Stages the datasets listed in ``corpora.datasets`` (for the shared ``languages``) into ``data/raw``
with the mirror's layout, from ``corpora.mirror`` or, when it is null, by download
(``corpora.base_url`` or each dataset's canonical URL), checksum-verified; see
:func:`xdistill.data.corpora.stage_corpora`.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from xdistill.io import PARAMS_FILE, load_params


@click.command()
@click.option("--params", default=PARAMS_FILE, show_default=True, help="params file")
@click.option("--out", default="data/raw", show_default=True, help="raw corpora folder")
@click.option("--mirror", default=None, help="override corpora.mirror (a folder; relative: to the current folder)")
def command(params: str, out: str, mirror: str | None) -> int:
    """Stage the configured raw corpora into data/raw (from the mirror or by download), checksum-verified."""
    from xdistill.data.corpora import stage_corpora
    from xdistill.data.languages import check_languages

    all_params = load_params(path=params)
    section = all_params.get("corpora") or {}
    if mirror is None and section.get("mirror") is not None:
        mirror = section["mirror"]
        if not Path(mirror).is_absolute():
            # relative to the params file's folder (the project root); kept relative so that data/raw's
            # MANIFEST.json (a DVC output) is the same in every clone
            mirror = os.path.normpath(Path(params).parent / mirror)
    manifest = stage_corpora(
        out,
        datasets=section.get("datasets") or {},
        languages=check_languages(all_params.get("languages"), params),
        mirror=mirror,
        base_url=section.get("base_url"),
        urls=section.get("urls") or {},
    )
    click.echo(f"{out}: {len(manifest['files'])} files, {manifest['total_bytes'] / 1e6:.1f} MB")
    return 0
