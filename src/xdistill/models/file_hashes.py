"""SHA-256 of files, cached by (absolute path, size, mtime) in ``<cache root>/file-hashes.json``.

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

# this process's view of the cache: absolute path -> (size, mtime_ns, sha256)
_known: dict[str, tuple[int, int, str]] = {}


def _cache_file() -> Path:
    return cache_root() / HASH_CACHE_FILE


def _read_cache(path: Path) -> dict[str, tuple[int, int, str]]:
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
        return {name: (int(size), int(mtime), str(digest)) for name, (size, mtime, digest) in entries.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}  # absent or damaged: it is only a cache, rebuilt as files are hashed


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(_READ_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def file_hashes(files: list[Path]) -> list[str]:
    """The SHA-256 of each file, read only for files whose (path, size, mtime) is not cached."""
    stats = [(str(file.resolve()), file.stat()) for file in files]
    missing = [(name, st) for name, st in stats if _known.get(name, (None, None))[:2] != (st.st_size, st.st_mtime_ns)]
    if missing:
        _known.update(_read_cache(_cache_file()))
        missing = [(name, st) for name, st in missing
                   if _known.get(name, (None, None))[:2] != (st.st_size, st.st_mtime_ns)]
    if missing:
        for name, st in missing:
            log.info("hashing %s (%.0f MB, once per change)", name, st.st_size / 1e6)
            _known[name] = (st.st_size, st.st_mtime_ns, _sha256(Path(name)))
        _save(dict(missing))
    return [_known[name][2] for name, _ in stats]


def _save(updated: dict[str, os.stat_result]) -> None:
    """Merge this process's new hashes into the cache file (other processes may have added theirs)."""
    cache = _cache_file()
    cache.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(cache.with_name(f".{cache.name}.lock")):
        entries = _read_cache(cache)
        entries.update({name: _known[name] for name in updated})
        # forget files that are gone (temporary model copies), so the cache does not grow without end
        entries = {name: entry for name, entry in entries.items() if os.path.exists(name)}
        write_json_atomic(cache, {name: list(entry) for name, entry in entries.items()})
