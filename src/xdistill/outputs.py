"""Checks on an output path, made before any heavy work: an output never replaces an input, and it can be written.

Every command that writes a file (``encode``, ``mine``, ``search``) or a folder (``export``) calls these first,
so a mistyped ``-o`` fails in a second with the path named, instead of overwriting the input it was about to
read or failing after minutes of encoding.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from xdistill.errors import XdistillError


def check_output_file(output: Path, inputs: Iterable[Path | str | None]) -> None:
    """Refuse ``output`` when it is (or lies inside) one of ``inputs``, is a folder, or cannot be written."""
    check_apart_from_inputs(output, inputs)
    if output.is_dir():
        raise XdistillError(f"{output}: is a folder; give a file name for the output")
    check_writable(output)


def check_apart_from_inputs(output: Path, inputs: Iterable[Path | str | None]) -> None:
    """Refuse an output that names an input, or lies inside an input folder (a model folder, say)."""
    target = output.resolve()
    for given in inputs:
        if given is None or not Path(given).exists():
            continue  # a model spec such as pypi:<name> is no path
        source = Path(given).resolve()
        if target == source:
            raise XdistillError(f"{output}: is also an input of this command; writing it would destroy the input")
        if source.is_dir() and target.is_relative_to(source):
            raise XdistillError(f"{output}: lies inside the input folder {given}; write the output beside it")


def check_writable(output: Path) -> None:
    """Refuse an output whose nearest existing parent is not a folder that takes a new file.

    The test is a real write: a uniquely named empty file is made in that folder and removed. ``os.access``
    answers yes for root on a read-only mount or in ``/proc``, where the write itself would fail only after the
    work; the probe fails there for every user, before any model is loaded. Outputs are still written atomically.
    """
    parent = output.resolve().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise XdistillError(f"{output}: {parent} is a file, not a folder")
    try:
        handle, probe = tempfile.mkstemp(prefix=".xdistill-write-probe-", dir=parent)
    except OSError as exc:
        raise XdistillError(f"{output}: the folder {parent} is not writable ({exc.strerror or exc})") from None
    os.close(handle)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(probe)
