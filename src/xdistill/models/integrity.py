"""Checks that a model folder's files are whole before a loader reads them, so a damaged folder is named.

A truncated or overwritten ``model.safetensors``, a ``config.json`` that is no JSON, or a ``modules.json``
naming a module folder that is not there otherwise surface as a traceback from deep inside transformers
or safetensors. These checks read only headers and small JSON files: cheap beside loading the model.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from xdistill.errors import InputFileError

# JSON files larger than this (a tokenizer.json of a large vocabulary) are left to the loader
MAX_CHECKED_JSON_BYTES = 4 * 1024 * 1024
# module classes that save no files (their folder may be missing)
NO_FILES_MODULES = ("Normalize",)
# safetensors' own bound on its JSON header (100 MB)
MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024


def check_json_file(path: Path) -> Any:
    """The content of a small JSON file; an :class:`InputFileError` naming it when it is no valid JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise InputFileError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start}); the file is damaged") from None
    except json.JSONDecodeError as exc:
        raise InputFileError(path, f"not valid JSON ({exc.msg}); the file is damaged", exc.lineno) from None


def check_safetensors(path: Path) -> None:
    """Refuse a ``.safetensors`` file whose header is unreadable or whose tensors reach past its end."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            raise InputFileError(path, f"truncated safetensors file ({size} bytes, no header)")
        (header_size,) = struct.unpack("<Q", prefix)
        if header_size > min(MAX_SAFETENSORS_HEADER, size - 8):
            raise InputFileError(path, "not a safetensors file, or a truncated one (its header length is impossible)")
        raw = handle.read(header_size)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise InputFileError(path, "not a safetensors file (its header is no JSON); the file is damaged") from None
    if not isinstance(header, dict):
        raise InputFileError(path, "not a safetensors file (its header is no JSON object)")
    ends = [
        int(entry["data_offsets"][1])
        for name, entry in header.items()
        if name != "__metadata__" and isinstance(entry, dict) and len(entry.get("data_offsets") or []) == 2
    ]
    needed = 8 + header_size + max(ends, default=0)
    if needed > size:
        raise InputFileError(path, f"truncated safetensors file: {size} bytes where its header needs {needed}")


def check_model_files(folder: Path) -> None:
    """Check the files a sentence-transformers (or transformers) folder is loaded from.

    ``modules.json`` must list module entries whose folders exist; every small JSON file and every
    ``.safetensors`` file of the folder and of its module folders must be whole.
    """
    folders = [folder]
    modules_file = folder / "modules.json"
    if modules_file.is_file():
        modules = check_json_file(modules_file)
        if not isinstance(modules, list) or not all(isinstance(m, dict) and "type" in m for m in modules):
            raise InputFileError(modules_file, "not a sentence-transformers module list (entries with 'type', 'path')")
        for module in modules:
            path = str(module.get("path") or "")
            module_dir = folder / path
            # Normalize has no files: sentence-transformers folders often list a folder for it that is not there
            if path and not module_dir.is_dir() and not str(module["type"]).endswith(NO_FILES_MODULES):
                raise InputFileError(
                    folder, f"module '{module.get('name', path)}' ({module['type']}) is missing: no folder {path}/"
                )
            if path:
                folders.append(module_dir)
    for where in folders:
        for json_file in sorted(where.glob("*.json")):
            if json_file.stat().st_size <= MAX_CHECKED_JSON_BYTES:
                check_json_file(json_file)
        for weights in sorted(where.glob("*.safetensors")):
            check_safetensors(weights)


def check_module_types(folder: Path) -> None:
    """Refuse a ``modules.json`` whose module classes cannot be imported (a renamed or damaged entry), naming
    the module; for callers that load the folder where a loader's error would surface as a traceback."""
    modules_file = folder / "modules.json"
    if not modules_file.is_file():
        return
    from sentence_transformers.util import import_from_string

    for module in check_json_file(modules_file):
        try:
            import_from_string(str(module["type"]))
        except (ImportError, ValueError, AttributeError) as exc:
            raise InputFileError(
                modules_file, f"module '{module.get('name', '?')}' has a class that cannot be imported ({exc})"
            ) from None
