"""``xdistill mine SRC.txt TGT.txt --model SPEC -o OUT.tsv``: margin-based parallel sentence mining.

The lines with text of both files (blank lines are no candidates) are embedded shard by shard
to ``.npy`` files in a work folder, searched shard by shard (exact inner product by default,
``--index ivf`` for large corpora), margin-scored and written as ``score<TAB>source<TAB>target``
lines by decreasing score (atomically; tabs and line breaks inside a sentence become spaces). The
embeddings kept in ``--work-dir`` carry the sidecar ``xdistill encode`` writes (``src.npy.json``), so they can
be searched later as indexes of a known model and space.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from xdistill.cli.export import backend_option, output_errors
from xdistill.mining.margin import MARGINS, RETRIEVALS

logger = logging.getLogger(__name__)

WRITE_CHUNK = 10_000
_TEXT_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


@click.command()
@click.argument("src", type=_TEXT_FILE)
@click.argument("tgt", type=_TEXT_FILE)
@click.option(
    "--model",
    required=True,
    help="model spec: pypi:<name>, a local folder, models:/<name>@<alias> or models:/<name>/<version>, a hub id",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="output TSV: score, source, target",
)
@click.option(
    "-k", "--k", type=click.IntRange(min=1), default=4, show_default=True, help="nearest neighbours per direction"
)
@click.option("--margin", type=click.Choice(MARGINS), default="ratio", show_default=True, help="margin function")
@click.option("--retrieval", type=click.Choice(RETRIEVALS), default="max", show_default=True, help="retrieval mode")
@click.option(
    "--threshold",
    type=float,
    default=None,
    help="keep only pairs scoring at least this (default: write every candidate)",
)
@click.option(
    "--index",
    type=click.Choice(("flat", "ivf")),
    default="flat",
    show_default=True,
    help="flat: exact inner-product search; ivf: approximate, for large corpora",
)
@click.option(
    "--nprobe", type=click.IntRange(min=1), default=16, show_default=True, help="IVF clusters visited per query"
)
@click.option(
    "--shard-rows",
    type=click.IntRange(min=1),
    default=100_000,
    show_default=True,
    help="embedding rows per shard in memory during search",
)
@click.option(
    "--batch-size", type=click.IntRange(min=1), default=64, show_default=True, help="sentences per forward pass"
)
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="where the embeddings are written (default: a temporary folder, removed after)",
)
@click.option("--device", default=None, help="torch device (default: automatic)")
@backend_option
@click.option("--no-progress", is_flag=True, help="hide the progress bars")
def command(src: Path, tgt: Path, output: Path, work_dir: Path | None, **options: Any) -> int:
    """Mine parallel sentence pairs between SRC and TGT (UTF-8, one sentence per line)."""
    from xdistill.mining.stream import LineFile
    from xdistill.models.registry_model import pin_version
    from xdistill.outputs import check_output_file, check_writable

    check_output_file(output, [src, tgt, options.get("model")])
    src_lines, tgt_lines = LineFile(src), LineFile(tgt)
    options["model"] = pin_version(options["model"])  # one version for the whole run, if an alias moves
    if work_dir is not None:
        with output_errors(work_dir):
            work_dir.mkdir(parents=True, exist_ok=True)
            check_writable(work_dir / "src.npy")
    with output_errors(output):
        output.parent.mkdir(parents=True, exist_ok=True)
        if work_dir is not None:
            count = _mine(src_lines, tgt_lines, output, work_dir, **options)
        else:
            with tempfile.TemporaryDirectory(prefix="xdistill-mine-", dir=output.resolve().parent) as work:
                count = _mine(src_lines, tgt_lines, output, Path(work), **options)
    logger.info("wrote %d pairs to %s", count, output)
    return 0


def _mine(
    src_lines,
    tgt_lines,
    output: Path,
    work_dir: Path,
    *,
    model: str,
    k: int,
    margin: str,
    retrieval: str,
    threshold: float | None,
    index: str,
    nprobe: int,
    shard_rows: int,
    batch_size: int,
    device: str | None,
    backend: str,
    no_progress: bool,
) -> int:
    from xdistill.mining.margin import MinedPairs
    from xdistill.mining.stream import encode_file, mine_npy
    from xdistill.models import load_encoder
    from xdistill.models.identity import vectors_info
    from xdistill.vectors import write_sidecar

    progress = not no_progress
    encoder = load_encoder(model, device=device, backend=backend)
    info = vectors_info(model, encoder.dimension, teacher_space=False, backend=backend)
    embeddings, text_rows = [], []
    for side, lines in (("src", src_lines), ("tgt", tgt_lines)):
        rows = lines.text_rows()  # blank lines are no candidates; the output keeps the files' line numbers
        text_rows.append(rows)
        embeddings.append(
            encode_file(
                encoder,
                lines,
                work_dir / f"{side}.npy",
                batch_size=batch_size,
                shard_rows=min(shard_rows, 10_000),
                progress=progress,
                rows=rows,
            )
        )
        write_sidecar(embeddings[-1], replace(info, rows=len(rows)))
    pairs = mine_npy(
        embeddings[0],
        embeddings[1],
        k=k,
        margin=margin,
        retrieval=retrieval,
        shard_rows=shard_rows,
        index=index,
        nprobe=nprobe,
        progress=progress,
    )
    pairs = MinedPairs(text_rows[0][pairs.src], text_rows[1][pairs.tgt], pairs.scores)
    if threshold is not None:
        pairs = pairs.above(threshold)
    return write_pairs(pairs, src_lines, tgt_lines, output, progress=progress)


def write_pairs(pairs, src_lines, tgt_lines, output: Path, *, progress: bool = True) -> int:
    """Write ``score<TAB>source<TAB>target`` lines (pairs already sorted by score), atomically."""
    from tqdm.auto import tqdm

    from xdistill.io import atomic_path
    from xdistill.mining.stream import tsv_field

    with (
        atomic_path(output) as tmp,
        tmp.open("w", encoding="utf-8") as handle,
        tqdm(total=len(pairs), desc="write pairs", unit="pair", disable=not progress) as bar,
    ):
        for start in range(0, len(pairs), WRITE_CHUNK):
            chunk = slice(start, start + WRITE_CHUNK)
            sources = src_lines.lines(pairs.src[chunk])
            targets = tgt_lines.lines(pairs.tgt[chunk])
            handle.writelines(
                f"{score:.6f}\t{tsv_field(s)}\t{tsv_field(t)}\n"
                for score, s, t in zip(pairs.scores[chunk].tolist(), sources, targets)
            )
            bar.update(len(sources))
    return len(pairs)
