"""Where converted and assembled models live: one user cache folder shared by every run."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

from xdistill.errors import XdistillError
from xdistill.io import atomic_path, write_json_atomic

log = logging.getLogger(__name__)

CACHE_ENV = "XDISTILL_CACHE_DIR"
# What a built model folder was made from (its inputs' names, sizes and SHA-256): a folder whose record
# differs from the inputs' now is stale and built again.
SOURCE_RECORD = "xdistill_source.json"


def cache_root() -> Path:
    """The xdistill cache root: ``$XDISTILL_CACHE_DIR``, else ``$XDG_CACHE_HOME/xdistill``, else
    ``~/.cache/xdistill``."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "xdistill"


def model_cache_dir(name: str) -> Path:
    """The cache folder of one converted/assembled model, ``<cache root>/models/<name>``."""
    return cache_root() / "models" / name


def build_lock(folder: Path) -> FileLock:
    """An exclusive lock on building ``folder``, so parallel processes convert it only once.

    The lock is a sibling file ``.<name>.lock``; callers re-check the cache after acquiring it.
    """
    folder.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(folder.parent / f".{folder.name}.lock")


def cache_is_current(folder: Path, record: dict) -> bool:
    """True when ``folder`` holds a model built from exactly the inputs ``record`` describes."""
    record_file = folder / SOURCE_RECORD
    if not (folder / "modules.json").is_file() or not record_file.is_file():
        return False
    try:
        return json.loads(record_file.read_text(encoding="utf-8")) == record
    except (OSError, json.JSONDecodeError):
        return False


def check_replaceable(folder: Path) -> None:
    """Refuse to build into an existing folder that holds something other than a model this project built
    (no :data:`SOURCE_RECORD`): building replaces the whole folder, and its files would be gone."""
    if folder.is_dir() and not (folder / SOURCE_RECORD).is_file() and any(folder.iterdir()):
        raise XdistillError(
            f"{folder}: not empty and not a model folder xdistill built ({SOURCE_RECORD} missing); "
            "building replaces the whole folder: give an empty or new folder"
        )


def build_once(folder: Path, record: dict, build: Callable[[Path], None], what: str, force: bool = False) -> Path:
    """``folder`` built from the inputs ``record`` describes, by ``build(scratch folder)``, unless it already is.

    One process builds while the others wait on :func:`build_lock` and then find it current; the folder is
    replaced atomically with its record inside, so a failure or a kill leaves the previous state.
    """
    if not force and cache_is_current(folder, record):
        return folder
    with build_lock(folder):
        if not force and cache_is_current(folder, record):  # built by another process while this one waited
            return folder
        check_replaceable(folder)
        started = time.perf_counter()
        log.info("building %s into %s (one time)", what, folder)
        with atomic_path(folder, is_dir=True) as tmp:
            build(tmp)
            write_json_atomic(tmp / SOURCE_RECORD, record)
        log.info("built %s in %.1f s", what, time.perf_counter() - started)
    return folder
