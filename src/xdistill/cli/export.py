"""``xdistill export STUDENT -o OUT``: the student as ONNX fp32, ONNX int8 and fp16 safetensors.

See :func:`xdistill.export.writer.export_student`. Use the result with
``xdistill encode|mine --model OUT --backend onnx|onnx-int8|torch``.
"""

from __future__ import annotations

import contextlib
import errno
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import click

from xdistill.errors import XdistillError
from xdistill.export.files import BACKENDS
from xdistill.export.writer import FORMATS

F = TypeVar("F", bound=Callable[..., object])


@click.command()
@click.argument("student")
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
def command(student: str, output: Path, formats: tuple[str, ...], force: bool) -> int:
    """Export STUDENT (a sentence-transformers folder such as models/student, or a registered model:
    models:/<name>@<alias>, models:/<name>/<version>) for fast CPU inference."""
    from xdistill.export.model_card import card_for_export
    from xdistill.export.writer import _check_apart, check_destination, export_student
    from xdistill.models.integrity import check_module_types
    from xdistill.models.registry_model import is_registry_uri
    from xdistill.models.resolve import check_model_folder, resolve_model_dir

    if is_registry_uri(student):
        check_destination(output, force)  # before a download
        folder = resolve_model_dir(student)
    else:
        folder = Path(student)
        if not folder.is_dir():
            raise XdistillError(f"{folder}: " + ("not a folder" if folder.exists() else "student folder not found"))
        _check_apart(folder, output)
        check_destination(output, force)
    check_model_folder(folder)  # a damaged student is named here, not in a traceback of its loader
    check_module_types(folder)
    with output_errors(output):
        report = export_student(folder, output, list(formats), force=force)
        card_for_export(folder, output, list(formats))  # the student's card, not sentence-transformers' template
    click.echo(json.dumps(report.as_dict(), indent=2))
    return 0


# What a destination that cannot be written raises on the way (a read-only file system or folder, a full disk)
_WRITE_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR, errno.EISDIR}


@contextlib.contextmanager
def output_errors(output: Path) -> Iterator[None]:
    """Report a write that the file system refuses as an :class:`XdistillError` naming ``output``, not a traceback.

    The commands check their destination first (:func:`xdistill.outputs.check_output_file`), but a folder can
    look writable and still refuse (a read-only mount seen by root, a full disk, permissions changed meanwhile).
    """
    try:
        yield
    except OSError as exc:
        if exc.errno not in _WRITE_ERRNOS:
            raise
        where = f" ({exc.filename})" if exc.filename and Path(exc.filename) != output else ""
        raise XdistillError(f"{output}: cannot be written: {exc.strerror or exc}{where}") from None


def backend_option(function: F) -> F:
    """``--backend`` of the commands that encode with a student (encode, mine)."""
    return click.option(
        "--backend",
        type=click.Choice(BACKENDS),
        default="torch",
        show_default=True,
        help="torch, or the ONNX fp32 / int8 files of a folder written by xdistill export (CPU)",
    )(function)
