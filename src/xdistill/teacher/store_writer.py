"""Writing a teacher's sub-store durably: the lock, atomic shard files, the index that publishes them.

The store's format and its reading side are :mod:`xdistill.teacher.store` (its docstring says why
the store has this shape). A writer holds the sub-store's lock (:func:`substore_writer`), writes
each shard's files under temporary names, fsyncs and renames them into place, and only then
replaces ``index.json`` atomically, so a crash at any moment leaves the previous consistent store;
the next writer removes what an interrupted append left unlisted.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock

from xdistill.errors import XdistillError
from xdistill.io import atomic_path, write_json_atomic
from xdistill.teacher.store import (
    CANONICAL_SHARD_ROWS,
    EMBEDDING_DTYPE,
    INDEX_FILE,
    KEY_DTYPE,
    KEY_SCHEME,
    LOCK_FILE,
    SHARD_FILE,
    STORE_FORMAT,
    Shard,
    TeacherStore,
    file_blake2b,
    read_index,
    substore_name,
)

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def substore_writer(store_dir: str | Path, teacher_id: str, teacher_spec: str) -> Iterator[SubstoreWriter]:
    """Hold the write lock of a teacher's sub-store and yield its writer.

    Readers need no lock: no file is modified in place, and a reader's memory maps keep files a
    canonical rewrite removes readable (DVC runs a workspace's stages one at a time, so no
    reader opens a store while its stage rewrites it). A sub-store this call created is removed
    again when it ends before the first commit, so a failed first run leaves nothing behind.
    """
    path = Path(store_dir) / substore_name(teacher_id)
    created = not path.exists()
    try:
        path.mkdir(parents=True, exist_ok=True)
        with FileLock(path / LOCK_FILE):
            yield SubstoreWriter(path, teacher_id, teacher_spec)
    finally:
        if created and not (path / INDEX_FILE).exists():
            shutil.rmtree(path, ignore_errors=True)


def _write_npy_durably(final: Path, array: np.ndarray) -> tuple[int, str]:
    """Write ``array`` to ``final`` atomically and fsync it; return (size, blake2b)."""
    with atomic_path(final) as tmp:
        tmp.chmod(0o644)  # a shareable data file, not a private temp file
        with tmp.open("wb") as handle:
            np.save(handle, array, allow_pickle=False)
            handle.flush()
            os.fsync(handle.fileno())
    _fsync_dir(final.parent)  # the rename too: an index naming this shard must not outlive it in a power loss
    return final.stat().st_size, file_blake2b(final)


class SubstoreWriter:
    """Appends shards to one sub-store; obtained from :func:`substore_writer`, which holds the lock."""

    def __init__(self, path: Path, teacher_id: str, teacher_spec: str) -> None:
        self.path = path
        self.teacher_id = teacher_id
        self.teacher_spec = teacher_spec
        self.index: dict[str, Any] | None = read_index(path / INDEX_FILE) if (path / INDEX_FILE).is_file() else None
        if self.index is not None and self.index["teacher_id"] != teacher_id:
            raise XdistillError(
                f"{path}: holds teacher {self.index['teacher_id']!r}, refusing to add {teacher_id!r} to it"
            )
        self._remove_orphans()

    def _remove_orphans(self) -> None:
        """Delete leftovers of an interrupted append: temp files and shards the index never listed."""
        listed = self._listed_files()
        for entry in self.path.iterdir():
            leftover = entry.name.startswith(".") and ".tmp-" in entry.name
            orphan = SHARD_FILE.match(entry.name) is not None and entry.name not in listed
            if (leftover or orphan) and entry.is_file():
                logger.info("removing leftover of an interrupted append: %s", entry)
                entry.unlink(missing_ok=True)

    def missing(self, keys: np.ndarray) -> np.ndarray:
        """Indices of the ``keys`` that have no embedding in the sub-store yet."""
        if self.index is None:
            return np.arange(len(keys))
        return np.flatnonzero(~TeacherStore.open(self.path).contains_keys(keys))

    def append(self, keys: np.ndarray, embeddings: np.ndarray) -> None:
        """Commit one shard: data files first, then the index that makes them visible."""
        if not np.isfinite(embeddings).all():
            raise XdistillError(f"{self.path}: the teacher produced non-finite embeddings")
        half = embeddings.astype(EMBEDDING_DTYPE)
        if not np.isfinite(half).all():
            raise XdistillError(f"{self.path}: teacher embeddings overflow float16 (values beyond ±65504)")
        if self.index is None:
            self.index = {
                "format": STORE_FORMAT,
                "teacher_id": self.teacher_id,
                "teacher_spec": self.teacher_spec,
                "dimension": int(embeddings.shape[1]),
                "dtype": EMBEDDING_DTYPE.str,
                "key": KEY_SCHEME,
                "rows": 0,
                "shards": [],
            }
        if embeddings.shape[1] != self.index["dimension"]:
            raise XdistillError(
                f"{self.path}: embeddings of dimension {embeddings.shape[1]}, the store holds {self.index['dimension']}"
            )
        number = max((s["number"] for s in self.index["shards"]), default=0) + 1
        shard = self._write_shard(number, keys, half)
        self._publish([*self.index["shards"], shard.to_json()])

    def canonicalize(self, shard_rows: int = CANONICAL_SHARD_ROWS) -> bool:
        """Rewrite the sub-store so that its files depend on its content alone; True if it did.

        Appends leave rows in the order they were committed (length-sorted when encoded, key order
        when copied from the shared store), so two stores with the same vectors could differ byte
        for byte, and DVC would see another ``data/teacher`` (a run-cache miss downstream). The
        canonical layout is rows sorted by key in shards of ``shard_rows`` numbered from 1.
        Crash-safe like an append: the sorted shards are written under fresh numbers and published,
        then hard-linked to their final numbers and published again; whatever a crash leaves
        unlisted is an orphan that the next writer removes.
        """
        if self.index is None:
            return False
        store = TeacherStore.open(self.path)
        if self._is_canonical(store, shard_rows):
            return False
        old_files = self._listed_files()
        final_count = -(-len(store) // shard_rows)
        first_staged = max(max(s["number"] for s in self.index["shards"]), final_count) + 1
        order = store.rows_in_key_order()
        staged = []
        for i, start in enumerate(range(0, len(order), shard_rows)):
            rows = order[start : start + shard_rows]
            half = store.gather(rows).astype(EMBEDDING_DTYPE)  # fp16 -> fp32 -> fp16 is exact
            staged.append(self._write_shard(first_staged + i, store.sorted_keys[start : start + shard_rows], half))
        del store  # release the memory maps of the files about to be removed
        self._publish([s.to_json() for s in staged])
        self._remove_files(old_files)
        final = [self._link_shard(s, number) for number, s in enumerate(staged, start=1)]
        self._publish([s.to_json() for s in final])
        self._remove_files({name for s in staged for name in (s.keys_file, s.emb_file)})
        logger.info("teacher store %s: rewritten in key order (%d rows, %d shards)", self.path, len(order), len(final))
        return True

    # -- helpers of append and canonicalize ----------------------------------------------------

    def _is_canonical(self, store: TeacherStore, shard_rows: int) -> bool:
        assert self.index is not None  # canonicalize returns early for a store without an index
        shards = self.index["shards"]
        sizes = [int(s["rows"]) for s in shards]
        numbered = [int(s["number"]) for s in shards] == list(range(1, len(shards) + 1))
        full = all(size == shard_rows for size in sizes[:-1]) and 0 < sizes[-1] <= shard_rows
        in_order = bool(np.array_equal(store.rows_in_key_order(), np.arange(len(store))))
        checksummed = all(s.get("keys_blake2b") for s in shards)  # a store written before keys had checksums
        return numbered and full and in_order and checksummed

    def _listed_files(self) -> set[str]:
        """The shard files the index lists (none before the first commit)."""
        shards = self.index["shards"] if self.index else []
        return {name for s in shards for name in (s.get("keys_file"), s.get("emb_file")) if name}

    def _remove_files(self, names: Iterable[str]) -> None:
        for name in names:
            (self.path / name).unlink(missing_ok=True)

    def _write_shard(self, number: int, keys: np.ndarray, half: np.ndarray) -> Shard:
        keys_file, emb_file = f"keys-{number:06d}.npy", f"emb-{number:06d}.npy"
        keys_bytes, keys_hash = _write_npy_durably(self.path / keys_file, np.ascontiguousarray(keys, dtype=KEY_DTYPE))
        emb_bytes, emb_hash = _write_npy_durably(self.path / emb_file, half)
        return Shard(number, len(keys), keys_file, emb_file, keys_bytes, emb_bytes, emb_hash, keys_hash)

    def _link_shard(self, shard: Shard, number: int) -> Shard:
        """The same shard under another number: hard links (no data copied), a copy where links fail."""
        renamed = Shard(
            number,
            shard.rows,
            f"keys-{number:06d}.npy",
            f"emb-{number:06d}.npy",
            shard.keys_bytes,
            shard.emb_bytes,
            shard.emb_blake2b,
            shard.keys_blake2b,
        )
        for source, target in ((shard.keys_file, renamed.keys_file), (shard.emb_file, renamed.emb_file)):
            (self.path / target).unlink(missing_ok=True)  # an orphan of an interrupted rewrite
            try:
                os.link(self.path / source, self.path / target)
            except OSError:
                with atomic_path(self.path / target) as tmp:
                    shutil.copyfile(self.path / source, tmp)
        _fsync_dir(self.path)
        return renamed

    def _publish(self, shards: list[dict[str, Any]]) -> None:
        """Replace the index (atomically): from now on exactly ``shards`` make up the sub-store."""
        assert self.index is not None
        updated = dict(self.index)
        updated["shards"] = shards
        updated["rows"] = sum(int(s["rows"]) for s in shards)
        updated["teacher_spec"] = self.teacher_spec
        write_json_atomic(self.path / INDEX_FILE, updated)
        self.index = updated


def _fsync_dir(path: Path) -> None:
    """Make new directory entries (links) durable before an index names them."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
