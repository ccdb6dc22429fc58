"""SHA-256 of files, cached by (absolute path, size, mtime, inode, ctime) in ``<cache root>/file-hashes.json``.

Size and mtime alone can match a replaced file (a checkpoint of the same architecture, copied with
``cp -p``, ``rsync -a`` or ``tar x``); its inode or its ctime (which no copy can set) then differs.

Hashing a model's files reads them all (~0.5 GB for mpnet); with the cache a file is read again only
after it was written. Model fingerprints and the conversion caches' source records use it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

from filelock import FileLock

from xdistill.io import write_json_atomic
from xdistill.models.cache import cache_root

log = logging.getLogger(__name__)

HASH_CACHE_FILE = "file-hashes.json"
_READ_BLOCK = 1 << 20

Stamp = tuple[int, int, int, int]  # size, mtime_ns, inode, ctime_ns

# this process's view of the cache: absolute path -> (stamp, sha256)
_known: dict[str, tuple[Stamp, str]] = {}


def _stamp(st: os.stat_result) -> Stamp:
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)


def _cache_file() -> Path:
    return cache_root() / HASH_CACHE_FILE


def _read_cache(path: Path) -> dict[str, tuple[Stamp, str]]:
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
        items = entries.items()
    except (OSError, ValueError, AttributeError):
        return {}  # absent or damaged: it is only a cache, rebuilt as files are hashed
    known: dict[str, tuple[Stamp, str]] = {}
    for name, entry in items:
        try:
            *stamp, digest = entry
            if len(stamp) == 4:  # an entry of an older layout is hashed again
                size, mtime_ns, inode, ctime_ns = (int(value) for value in stamp)
                known[name] = ((size, mtime_ns, inode, ctime_ns), str(digest))
        except (TypeError, ValueError):
            continue
    return known


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(_READ_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def file_hashes(files: list[Path]) -> list[str]:
    """The SHA-256 of each file, read only for files whose (path, size, mtime, inode, ctime) is not cached."""
    stats = [(str(file.resolve()), _stamp(file.stat())) for file in files]
    missing = [(name, stamp) for name, stamp in stats if _known.get(name, (None,))[0] != stamp]
    if missing:
        _known.update(_read_cache(_cache_file()))
        missing = [(name, stamp) for name, stamp in missing if _known.get(name, (None,))[0] != stamp]
    if missing:
        for name, stamp in missing:
            log.info("hashing %s (%.0f MB, once per change)", name, stamp[0] / 1e6)
            _known[name] = (stamp, _sha256(Path(name)))
        _save([name for name, _ in missing])
    return [_known[name][1] for name, _ in stats]


def _save(updated: list[str]) -> None:
    """Merge this process's new hashes into the cache file (other processes may have added theirs)."""
    cache = _cache_file()
    cache.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(cache.with_name(f".{cache.name}.lock")):
        entries = _read_cache(cache)
        entries.update({name: _known[name] for name in updated})
        # forget files that are gone (temporary model copies), so the cache does not grow without end
        entries = {name: entry for name, entry in entries.items() if os.path.exists(name)}
        write_json_atomic(cache, {name: [*stamp, digest] for name, (stamp, digest) in entries.items()})
