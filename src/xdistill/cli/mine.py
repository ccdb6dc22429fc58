"""``xdistill mine SRC.txt TGT.txt --model SPEC -o OUT.tsv``: margin-based parallel sentence mining.

Both files are embedded shard by shard to ``.npy`` files in a work folder, searched shard by
shard (exact inner product by default, ``--index ivf`` for large corpora), margin-scored and
written as ``score<TAB>source<TAB>target`` lines by decreasing score (atomically).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path

from xdistill.errors import XdistillError

logger = logging.getLogger(__name__)

WRITE_CHUNK = 10_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from xdistill.cli.export import add_backend_argument
    from xdistill.mining.margin import MARGINS, RETRIEVALS

    parser.add_argument("src", type=Path, help="source text file, one sentence per line")
    parser.add_argument("tgt", type=Path, help="target text file, one sentence per line")
    parser.add_argument("--model", required=True, help="model spec: pypi:<name>, a local folder or a hub id")
    parser.add_argument("-o", "--output", type=Path, required=True, help="output TSV: score, source, target")
    parser.add_argument("-k", "--k", type=int, default=4, help="nearest neighbours per direction (default 4)")
    parser.add_argument("--margin", choices=MARGINS, default="ratio", help="margin function (default ratio)")
    parser.add_argument("--retrieval", choices=RETRIEVALS, default="max", help="retrieval mode (default max)")
    parser.add_argument("--threshold", type=float, default=None,
                        help="keep only pairs scoring at least this (default: write every candidate)")
    parser.add_argument("--index", choices=("flat", "ivf"), default="flat",
                        help="flat: exact inner-product search (default); ivf: approximate, for large corpora")
    parser.add_argument("--nprobe", type=int, default=16, help="IVF clusters visited per query (default 16)")
    parser.add_argument("--shard-rows", type=int, default=100_000,
                        help="embedding rows per shard in memory during search (default 100000)")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per forward pass (default 64)")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="where the embeddings are written (default: a temporary folder, removed after)")
    parser.add_argument("--device", default=None, help="torch device (default: automatic)")
    add_backend_argument(parser)
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def run(args: argparse.Namespace) -> int:
    from xdistill.mining.stream import LineFile

    if args.k < 1:
        raise XdistillError(f"-k must be at least 1, got {args.k}")
    src_lines, tgt_lines = LineFile(args.src), LineFile(args.tgt)
    if args.work_dir is not None:
        args.work_dir.mkdir(parents=True, exist_ok=True)
        count = _mine(args, src_lines, tgt_lines, args.work_dir)
    else:
        with tempfile.TemporaryDirectory(prefix="xdistill-mine-", dir=args.output.resolve().parent) as work:
            count = _mine(args, src_lines, tgt_lines, Path(work))
    logger.info("wrote %d pairs to %s", count, args.output)
    return 0


def _mine(args: argparse.Namespace, src_lines, tgt_lines, work_dir: Path) -> int:
    from xdistill.mining.stream import encode_file, mine_npy
    from xdistill.models import load_encoder

    progress = not args.no_progress
    encoder = load_encoder(args.model, device=args.device, backend=args.backend)
    embeddings = []
    for side, lines in (("src", src_lines), ("tgt", tgt_lines)):
        embeddings.append(encode_file(encoder, lines.path, work_dir / f"{side}.npy", batch_size=args.batch_size,
                                      shard_rows=min(args.shard_rows, 10_000), progress=progress))
    pairs = mine_npy(embeddings[0], embeddings[1], k=args.k, margin=args.margin, retrieval=args.retrieval,
                     shard_rows=args.shard_rows, index=args.index, nprobe=args.nprobe, progress=progress)
    if args.threshold is not None:
        pairs = pairs.above(args.threshold)
    return write_pairs(pairs, src_lines, tgt_lines, args.output, progress=progress)


def write_pairs(pairs, src_lines, tgt_lines, output: Path, *, progress: bool = True) -> int:
    """Write ``score<TAB>source<TAB>target`` lines (pairs already sorted by score), atomically."""
    from tqdm.auto import tqdm

    from xdistill.io import atomic_path

    with atomic_path(output) as tmp, tmp.open("w", encoding="utf-8") as handle, \
            tqdm(total=len(pairs), desc="write pairs", unit="pair", disable=not progress) as bar:
        for start in range(0, len(pairs), WRITE_CHUNK):
            chunk = slice(start, start + WRITE_CHUNK)
            sources = src_lines.lines(pairs.src[chunk])
            targets = tgt_lines.lines(pairs.tgt[chunk])
            # a tab inside a sentence would shift the TSV columns: write it as a space
            handle.writelines(f"{score:.6f}\t{s.replace(chr(9), ' ')}\t{t.replace(chr(9), ' ')}\n"
                              for score, s, t in zip(pairs.scores[chunk].tolist(), sources, targets))
            bar.update(len(sources))
    return len(pairs)
