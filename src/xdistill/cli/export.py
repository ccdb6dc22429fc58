"""``xdistill export STUDENT -o OUT``: the student as ONNX fp32, ONNX int8 and fp16 safetensors.

See :func:`xdistill.export.writer.export_student`. Use the result with
``xdistill encode|mine --model OUT --backend onnx|onnx-int8|torch``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import click

from xdistill.export.files import BACKENDS
from xdistill.export.writer import FORMATS

F = TypeVar("F", bound=Callable[..., object])


@click.command()
@click.argument("student", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="folder to write: new, empty, or an earlier export (with --force)",
)
@click.option("--force", is_flag=True, help="replace an earlier export in OUTPUT (never any other folder)")
@click.option(
    "--formats",
    "formats",
    type=click.Choice(FORMATS),
    multiple=True,
    default=FORMATS,
    show_default=True,
    help="what to write (repeat the option for several)",
)
def command(student: Path, output: Path, formats: tuple[str, ...], force: bool) -> int:
    """Export STUDENT (a sentence-transformers folder, e.g. models/student) for fast CPU inference."""
    from xdistill.export.writer import export_student

    report = export_student(student, output, list(formats), force=force)
    click.echo(json.dumps(report.as_dict(), indent=2))
    return 0


def backend_option(function: F) -> F:
    """``--backend`` of the commands that encode with a student (encode, mine)."""
    return click.option(
        "--backend",
        type=click.Choice(BACKENDS),
        default="torch",
        show_default=True,
        help="torch, or the ONNX fp32 / int8 files of a folder written by xdistill export (CPU)",
    )(function)
