"""``xdistill encode FILE --model SPEC -o OUT.npy``: embed a text file, one row per line.

Lines are embedded in shards and appended to the output, so files larger than memory work;
the ``.npy`` (float32, L2-normalised rows) appears only once complete. ``--teacher-space`` writes a
student's teacher-space output instead (:mod:`xdistill.adapter.model`): vectors that sit
beside the teacher's own, so they query (or extend) an index the teacher built.

Beside ``OUT.npy`` it writes ``OUT.npy.json`` (:func:`xdistill.vectors.write_sidecar`): which model wrote the
vectors, in which space (the model's own, or a student's teacher space), their dimension and normalisation;
``xdistill search`` reads it to refuse queries of another space.
"""

from __future__ import annotations

import logging
from pathlib import Path

import click

from xdistill.cli.export import backend_option, output_errors

logger = logging.getLogger(__name__)


@click.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--model",
    required=True,
    help="model spec: pypi:<name>, a local folder, models:/<name>@<alias> or models:/<name>/<version>, a hub id",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True, help="output .npy file")
@click.option(
    "--batch-size", type=click.IntRange(min=1), default=64, show_default=True, help="sentences per forward pass"
)
@click.option(
    "--shard-rows",
    type=click.IntRange(min=1),
    default=10_000,
    show_default=True,
    help="sentences embedded and written per shard (bounds memory)",
)
@click.option("--device", default=None, help="torch device (default: automatic)")
@backend_option
@click.option(
    "--teacher-space",
    is_flag=True,
    help="write the student's teacher-space output (its adapter), to search an index built by the teacher",
)
@click.option("--no-progress", is_flag=True, help="hide the progress bar")
def command(
    file: Path,
    model: str,
    output: Path,
    batch_size: int,
    shard_rows: int,
    device: str | None,
    backend: str,
    teacher_space: bool,
    no_progress: bool,
) -> int:
    """Embed FILE (UTF-8, one sentence per line) into a .npy of float32, L2-normalised rows."""
    from xdistill.adapter.model import load_encoder_with_adapter
    from xdistill.mining.stream import LineFile, encode_file
    from xdistill.models.identity import vectors_info
    from xdistill.models.registry_model import pin_version
    from xdistill.outputs import check_output_file
    from xdistill.vectors import write_sidecar

    check_output_file(output, [file, model])
    lines = LineFile(file)  # fail on a bad input before loading the model (and index the file once)
    model = pin_version(model)  # models:/<name>@<alias> -> its version now: one version for the whole run
    encoder = load_encoder_with_adapter(model, device=device, backend=backend, teacher_space=teacher_space)
    info = vectors_info(model, encoder.dimension, teacher_space, rows=len(lines), backend=backend)
    with output_errors(output):
        out = encode_file(
            encoder, lines, output, batch_size=batch_size, shard_rows=shard_rows, progress=not no_progress
        )
        sidecar = write_sidecar(out, info)
    logger.info("wrote %s and %s", out, sidecar.name)
    return 0
