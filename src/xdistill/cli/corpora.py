"""``xdistill corpora``: the DVC ``corpora`` stage.

Stages the datasets listed in ``corpora.datasets`` (for the shared ``languages``) into ``data/raw``
with the mirror's layout, from ``corpora.mirror`` or, when it is null, by download
(``corpora.base_url`` or each dataset's canonical URL), checksum-verified; see
:func:`xdistill.data.corpora.stage_corpora`.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from xdistill.io import PARAMS_FILE, load_params


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", default=PARAMS_FILE, help="params file (default: %(default)s)")
    parser.add_argument("--out", default="data/raw", help="raw corpora folder (default: %(default)s)")
    parser.add_argument("--mirror", default=None, help="override corpora.mirror (a folder)")


def run(args: argparse.Namespace) -> int:
    from xdistill.data.corpora import stage_corpora

    params = load_params(path=args.params)
    section = params.get("corpora") or {}
    mirror = args.mirror if args.mirror is not None else section.get("mirror")
    if mirror is not None and not Path(mirror).is_absolute():
        # relative to the params file's folder (the project root); kept relative so that data/raw's
        # MANIFEST.json (a DVC output) is the same in every clone
        mirror = os.path.normpath(Path(args.params).parent / mirror)
    manifest = stage_corpora(
        args.out,
        datasets=section.get("datasets") or {},
        languages=params.get("languages") or [],
        mirror=mirror,
        base_url=section.get("base_url"),
        urls=section.get("urls") or {},
    )
    print(f"{args.out}: {len(manifest['files'])} files, {manifest['total_bytes'] / 1e6:.1f} MB")
    return 0
