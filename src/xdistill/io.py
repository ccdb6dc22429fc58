"""Small I/O helpers shared by every stage: atomic writes and params loading.

Every output is written under a temporary name in the destination folder and moved into
place with ``os.replace``, so a crash or a kill never leaves a half-written file or folder
for DVC to cache.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from xdistill.errors import InputFileError, XdistillError

PARAMS_FILE = "params.yaml"


def _current_umask() -> int:
    mask = os.umask(0)  # the only way to read it is to set it
    os.umask(mask)
    return mask


_UMASK = _current_umask()


@contextlib.contextmanager
def atomic_path(final: str | Path, *, is_dir: bool = False) -> Iterator[Path]:
    """Yield a temporary path next to ``final``; move it onto ``final`` only on success.

    With ``is_dir=True`` the temporary path is an (empty) folder and an existing ``final``
    folder is replaced as a whole.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".{final.name}.tmp-"
    if is_dir:
        tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=final.parent))
    else:
        fd, name = tempfile.mkstemp(prefix=prefix, dir=final.parent)
        os.close(fd)
        tmp = Path(name)
    try:
        yield tmp
        # mkdtemp/mkstemp make private 0700/0600 paths; the result gets what open()/mkdir() would give
        tmp.chmod((0o777 if is_dir else 0o666) & ~_UMASK)
        if is_dir:
            if final.exists():
                old = final.with_name(f".{final.name}.old-{os.getpid()}")
                os.replace(final, old)
                os.replace(tmp, final)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, final)
        else:
            os.replace(tmp, final)
    except BaseException:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_json_atomic(path: str | Path, data: Any) -> Path:
    """Write ``data`` as indented, key-sorted JSON to ``path`` atomically."""
    return write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def load_params(section: str | None = None, path: str | Path = PARAMS_FILE) -> dict[str, Any]:
    """Read ``params.yaml`` (or ``path``), returning one top-level section or the whole file."""
    path = Path(path)
    if not path.is_file():
        raise XdistillError(f"{path}: params file not found (run from the project root or pass --params)")
    try:
        params = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as exc:
        raise InputFileError(path, f"not a UTF-8 text file ({exc.reason})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise InputFileError(path, f"invalid YAML: {getattr(exc, 'problem', exc)}", line) from exc
    if not isinstance(params, dict):
        raise InputFileError(
            path, f"expected a mapping of sections (languages:, models:, ...), found a {type(params).__name__}"
        )
    if section is None:
        return params
    if section not in params:
        raise XdistillError(f"{path}: missing section '{section}'")
    return params[section]
