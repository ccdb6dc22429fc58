"""``xdistill teacher-embed``: the DVC ``teacher_embed`` stage.

Embeds every distinct source sentence of the parallel train/dev files with the teacher
(``models.teacher``) into the fp16 store ``data/teacher/`` (see
:func:`xdistill.training.teacher_store.build_teacher_store`). Sentences already stored for this
teacher are skipped, so re-runs after adding a language embed only the new sentences.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from xdistill.io import PARAMS_FILE, load_params

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", default=PARAMS_FILE, help="params file (default: %(default)s)")
    parser.add_argument(
        "--input", dest="inputs", action="append", default=None, metavar="FILE",
        help="parallel file(s) to embed the source column of (repeatable; "
             "default: data/parallel/train.tsv.gz and data/parallel/dev.tsv.gz)",
    )
    parser.add_argument("--store", default="data/teacher", help="teacher store folder (default: %(default)s)")
    parser.add_argument("--teacher", default=None, help="override models.teacher (a model spec)")
    parser.add_argument("--batch-size", type=int, default=None, help="override teacher_embed.batch_size")
    parser.add_argument("--device", default=None, help="override teacher_embed.device (cpu, cuda, ...)")


def stage_params(args: argparse.Namespace) -> dict[str, Any]:
    """The ``teacher_embed`` section plus the teacher spec, with command-line overrides."""
    params = load_params(path=args.params)
    section = dict(params.get("teacher_embed") or {})
    section["teacher"] = args.teacher or (params.get("models") or {}).get("teacher")
    if args.batch_size is not None:
        section["batch_size"] = args.batch_size
    if args.device is not None:
        section["device"] = args.device
    return section


def run(args: argparse.Namespace) -> int:
    from xdistill.training.teacher_store import build_teacher_store

    inputs = args.inputs or ["data/parallel/train.tsv.gz", "data/parallel/dev.tsv.gz"]
    stats = build_teacher_store(inputs, args.store, stage_params(args))
    print(
        f"teacher embeddings: {stats.n_requested} distinct source sentences, "
        f"{stats.n_new} embedded now, {stats.n_cached} already stored ({stats.seconds:.1f} s)"
    )
    return 0
