"""Where converted and assembled models live: one user cache folder shared by every run."""

from __future__ import annotations

import os
from pathlib import Path

from filelock import FileLock

CACHE_ENV = "XDISTILL_CACHE_DIR"


def cache_root() -> Path:
    """The xdistill cache root: ``$XDISTILL_CACHE_DIR``, else ``$XDG_CACHE_HOME/xdistill``, else ``~/.cache/xdistill``."""
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
