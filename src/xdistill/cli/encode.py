"""``xdistill encode FILE --model SPEC -o OUT.npy``: embed a text file, one row per line.

Lines are embedded in shards and appended to the output, so files larger than memory work;
the ``.npy`` (float32, L2-normalised rows) appears only once complete.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from xdistill.cli.export import add_backend_argument

    parser.add_argument("file", type=Path, help="UTF-8 text file, one sentence per line")
    parser.add_argument("--model", required=True, help="model spec: pypi:<name>, a local folder or a hub id")
    parser.add_argument("-o", "--output", type=Path, required=True, help="output .npy file")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per forward pass (default 64)")
    parser.add_argument("--shard-rows", type=int, default=10_000,
                        help="sentences embedded and written per shard (bounds memory; default 10000)")
    parser.add_argument("--device", default=None, help="torch device (default: automatic)")
    add_backend_argument(parser)
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def run(args: argparse.Namespace) -> int:
    from xdistill.mining.stream import LineFile, encode_file
    from xdistill.models import load_encoder

    LineFile(args.file)  # fail on a missing input before loading the model
    encoder = load_encoder(args.model, device=args.device, backend=args.backend)
    out = encode_file(encoder, args.file, args.output, batch_size=args.batch_size, shard_rows=args.shard_rows,
                      progress=not args.no_progress)
    logger.info("wrote %s", out)
    return 0
