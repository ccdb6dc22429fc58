"""On-disk store of teacher embeddings: one vector per (teacher, normalised sentence).

Layout of a store folder (``data/teacher/``, a DVC ``persist: true`` output)::

    data/teacher/
        teacher-<12 hex of the teacher fingerprint>/     one sub-store per teacher
            index.json            teacher identity, dimension, list of committed shards
            keys-000001.npy       [rows] structured (hi, lo) uint64: blake2b-128 of the normalised text
            emb-000001.npy        [rows, dim] float16, memory-mapped on read
            ...
            .lock                 advisory lock held by a writer

Why this shape:

- **Sub-store per teacher.** A new student, new loss weights or a new language never touch the
  teacher's vectors; switching teachers back and forth finds each teacher's vectors still there.
  A teacher encoded in half precision on a GPU (``teacher_embed.precision: fp16`` or ``bf16``) is
  a teacher of its own here (:func:`teacher_fingerprint`): fp32 and half-precision vectors never mix.
- **Append-only shards + atomic index.** An append writes new shard files under temporary names,
  renames them into place, and only then replaces ``index.json`` (itself atomically). The index
  lists only complete shards, so a crash or SIGKILL at any moment leaves the previous consistent
  store; orphan files of an interrupted append are ignored and cleaned up by the next writer.
  Long runs commit a shard every ``commit_rows`` sentences, so a killed run keeps its progress.
- **Canonical layout.** At the end of a ``teacher_embed`` run the sub-store is rewritten (only
  when needed) with rows sorted by key in shards of :data:`CANONICAL_SHARD_ROWS`, so its bytes
  depend on which vectors it holds, not on the order they arrived in: a workspace that copied its
  vectors from the shared store and one that encoded them hold the same ``data/teacher``, and
  DVC's run cache serves the stages after it
  (:meth:`~xdistill.teacher.store_writer.SubstoreWriter.canonicalize`).
- **Keys, not texts.** Sentences are keyed by a 128-bit hash of :func:`normalize_text`; the index
  stays small (16 bytes a sentence) and lookups are a vectorised binary search.
- **fp16 vectors.** Half the disk and page cache of fp32; teacher embeddings are unit-normalised,
  where fp16 keeps ~3 significant digits (cosine error ~1e-3 at worst, far below training noise).

This module is the format and the reading side (:class:`TeacherStore`); writing shards durably
under the lock is :mod:`xdistill.teacher.store_writer`, and filling the store with a teacher's
vectors is :mod:`xdistill.teacher.embed`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from xdistill.errors import InputFileError, XdistillError

STORE_FORMAT = 1
INDEX_FILE = "index.json"
LOCK_FILE = ".lock"
SUBSTORE_PREFIX = "teacher-"
KEY_DTYPE = np.dtype([("hi", "<u8"), ("lo", "<u8")])
EMBEDDING_DTYPE = np.dtype("<f2")
KEY_SCHEME = "blake2b-128(utf-8(normalize_text(text)))"
CANONICAL_SHARD_ROWS = 16384  # rows per shard of a canonical sub-store (store_writer.SubstoreWriter.canonicalize)
SHARD_FILE = re.compile(r"^(keys|emb)-(\d{6})\.npy$")


# --------------------------------------------------------------------------------------------
# Keys
# --------------------------------------------------------------------------------------------


def normalized_texts(texts: Iterable[str]) -> list[str]:
    """The project's canonical form of each text (the one the store is keyed and embedded by)."""
    from xdistill.data.normalize import normalize_text

    return [normalize_text(t) for t in texts]


def keys_of_normalized(texts: Sequence[str]) -> np.ndarray:
    """128-bit keys (structured ``hi``/``lo`` uint64) of already-normalised texts."""
    digests = b"".join(hashlib.blake2b(t.encode("utf-8"), digest_size=16).digest() for t in texts)
    raw = np.frombuffer(digests, dtype=">u8").reshape(-1, 2)
    keys = np.empty(len(texts), dtype=KEY_DTYPE)
    keys["hi"] = raw[:, 0]
    keys["lo"] = raw[:, 1]
    return keys


def substore_name(teacher_id: str) -> str:
    """Folder name of a teacher's sub-store: stable, filesystem-safe, derived from its identity."""
    return SUBSTORE_PREFIX + hashlib.sha256(teacher_id.encode("utf-8")).hexdigest()[:12]


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shard:
    """One committed shard as ``index.json`` lists it: its files, their sizes and the embeddings' checksum."""

    number: int
    rows: int
    keys_file: str
    emb_file: str
    keys_bytes: int
    emb_bytes: int
    emb_blake2b: str
    keys_blake2b: str | None = None  # recorded by stores written since keys were checksummed too

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _shard_from_json(index_path: Path, item: Any) -> Shard:
    try:
        optional = {"keys_blake2b"}
        return Shard(
            **{name: item.get(name) if name in optional else item[name] for name in Shard.__dataclass_fields__}
        )
    except (KeyError, TypeError) as exc:
        raise InputFileError(index_path, f"malformed shard entry {item!r} ({exc})") from exc


def _load_npy(path: Path, dtype: np.dtype, shape: tuple[int, ...], expected_bytes: int) -> np.ndarray:
    """Memory-map one shard file, checking it is complete and has the recorded layout."""
    if not path.is_file():
        raise InputFileError(path, "shard file listed in the store index is missing (store damaged)")
    size = path.stat().st_size
    if size != expected_bytes:
        raise InputFileError(
            path, f"file is {size} bytes, the store index records {expected_bytes} (truncated or corrupt)"
        )
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise InputFileError(path, f"not a readable .npy file ({exc})") from exc
    if array.dtype != dtype or array.shape != shape:
        raise InputFileError(
            path, f"holds {array.dtype} {array.shape}, the store index records {dtype} {shape} (corrupt)"
        )
    return array


def file_blake2b(path: Path) -> str:
    """blake2b-128 of a file's bytes (hex): the checksum the index records for an embedding shard."""
    digest = hashlib.blake2b(digest_size=16)
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class TeacherStore:
    """Read access to one teacher's embeddings (a consistent snapshot taken at :meth:`open`).

    >>> store = TeacherStore.open("data/teacher", teacher_spec="pypi:all-minilm-l6-v2")
    >>> store.lookup(["Hello world."]).shape        # float32 [1, store.dimension]
    """

    def __init__(
        self,
        path: Path,
        index: dict[str, Any],
        shards: list[Shard],
        keys: list[np.ndarray],
        embeddings: list[np.ndarray],
    ) -> None:
        self.path = path
        self.teacher_id: str = index["teacher_id"]
        self.teacher_spec: str = index.get("teacher_spec", "")
        self.dimension: int = int(index["dimension"])
        self._index = index
        self._shards = shards
        self._embeddings = embeddings
        self._offsets = np.cumsum([0] + [s.rows for s in shards], dtype=np.int64)
        all_keys = np.concatenate(keys) if keys else np.empty(0, dtype=KEY_DTYPE)
        self._order = np.argsort(all_keys, kind="stable")
        self._sorted_keys = all_keys[self._order]
        if len(all_keys) > 1 and np.any(self._sorted_keys[1:] == self._sorted_keys[:-1]):
            raise InputFileError(path / INDEX_FILE, "the same sentence key appears in two shards (corrupt store)")

    # -- opening ---------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        teacher_spec: str | None = None,
        teacher_id: str | None = None,
        precision: str = "fp32",
    ) -> TeacherStore:
        """Open a teacher's sub-store.

        ``path`` is either a sub-store folder (holding ``index.json``) or the store root
        (``data/teacher``). Under the root, the sub-store is chosen by ``teacher_id`` (a
        :func:`teacher_fingerprint`), by ``teacher_spec`` and ``precision`` (the
        ``teacher_embed.precision`` the vectors were encoded in; fingerprinted here),
        or, when neither is given, is the only one there.
        Raises :class:`XdistillError` when it is missing, corrupt or belongs to another teacher.
        """
        path = Path(path)
        if teacher_spec is not None and teacher_id is None:
            teacher_id = teacher_fingerprint(teacher_spec, precision)
        if not (path / INDEX_FILE).is_file():
            path = cls._choose_substore(path, teacher_id, teacher_spec)
        store = cls._open_substore(path)
        if teacher_id is not None and store.teacher_id != teacher_id:
            raise XdistillError(f"{path}: holds embeddings of teacher {store.teacher_id!r}, not of {teacher_id!r}")
        return store

    @staticmethod
    def _choose_substore(root: Path, teacher_id: str | None, teacher_spec: str | None) -> Path:
        if not root.is_dir():
            raise XdistillError(f"{root}: teacher store not found (run `xdistill teacher-embed` first)")
        if teacher_id is not None:
            sub = root / substore_name(teacher_id)
            if not (sub / INDEX_FILE).is_file():
                which = teacher_spec or teacher_id
                raise XdistillError(
                    f"{root}: no embeddings of teacher {which!r} (expected {sub.name}/); "
                    + (
                        _other_precisions_hint(root, teacher_id)
                        or "run `xdistill teacher-embed` with this teacher first"
                    )
                )
            return sub
        subs = list_substores(root)
        if len(subs) == 1:
            return subs[0]
        if not subs:
            raise XdistillError(f"{root}: teacher store is empty (no {SUBSTORE_PREFIX}*/{INDEX_FILE})")
        raise XdistillError(
            f"{root}: holds embeddings of {len(subs)} teachers ({', '.join(s.name for s in subs)}); "
            "say which with teacher_spec= or teacher_id="
        )

    @classmethod
    def _open_substore(cls, path: Path) -> TeacherStore:
        index_path = path / INDEX_FILE
        index = read_index(index_path)
        shards = [_shard_from_json(index_path, item) for item in index["shards"]]
        dimension = int(index["dimension"])
        keys, embeddings = [], []
        for shard in shards:
            keys.append(np.asarray(_load_npy(path / shard.keys_file, KEY_DTYPE, (shard.rows,), shard.keys_bytes)))
            embeddings.append(
                _load_npy(path / shard.emb_file, EMBEDDING_DTYPE, (shard.rows, dimension), shard.emb_bytes)
            )
        return cls(path, index, shards, keys, embeddings)

    # -- queries ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self._offsets[-1])

    def __repr__(self) -> str:
        return (
            f"TeacherStore({str(self.path)!r}, teacher={self.teacher_spec or self.teacher_id!r}, "
            f"rows={len(self)}, dim={self.dimension})"
        )

    def _positions(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(global row of each key or -1, found mask)."""
        if len(self._sorted_keys) == 0:
            return np.full(len(keys), -1, dtype=np.int64), np.zeros(len(keys), dtype=bool)
        pos = np.searchsorted(self._sorted_keys, keys)
        clipped = np.minimum(pos, len(self._sorted_keys) - 1)
        found = (pos < len(self._sorted_keys)) & (self._sorted_keys[clipped] == keys)
        rows = np.where(found, self._order[clipped], -1).astype(np.int64)
        return rows, found

    def contains(self, texts: Sequence[str]) -> np.ndarray:
        """bool [n]: whether each text (after normalisation) has a stored embedding."""
        return self.contains_keys(keys_of_normalized(normalized_texts(texts)))

    def contains_keys(self, keys: np.ndarray) -> np.ndarray:
        """bool [n]: whether each key (see :func:`keys_of_normalized`) is stored."""
        return self._positions(keys)[1]

    def rows_of_keys(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(store row of each key, -1 where absent; bool found mask), for :meth:`gather`."""
        return self._positions(keys)

    def row_ids(self, texts: Sequence[str]) -> np.ndarray:
        """int64 [n]: the store row of each text, for repeated :meth:`gather` without re-hashing.

        Raises :class:`XdistillError` naming the first text that is not in the store.
        """
        normalized = normalized_texts(texts)
        rows, found = self._positions(keys_of_normalized(normalized))
        if not found.all():
            missing = np.flatnonzero(~found)
            first = texts[int(missing[0])]
            raise XdistillError(
                f"{self.path}: {len(missing)} of {len(texts)} sentences have no teacher embedding, "
                f"first: {first!r} (re-run `xdistill teacher-embed` on the data you train with)"
            )
        return rows

    def gather(self, rows: np.ndarray) -> np.ndarray:
        """float32 [n, dim]: the embeddings at the given store rows."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty((len(rows), self.dimension), dtype=np.float32)
        if len(rows) == 0:
            return out
        if rows.min() < 0 or rows.max() >= len(self):
            raise XdistillError(f"{self.path}: row id out of range 0..{len(self) - 1}")
        shard_of_row = np.searchsorted(self._offsets, rows, side="right") - 1
        for shard in np.unique(shard_of_row):
            selected = shard_of_row == shard
            out[selected] = self._embeddings[shard][rows[selected] - self._offsets[shard]]
        return out

    def rows_in_key_order(self) -> np.ndarray:
        """int64 [len]: the store rows sorted by their sentence key (see :attr:`sorted_keys`)."""
        return self._order

    @property
    def sorted_keys(self) -> np.ndarray:
        """The stored sentence keys in ascending order."""
        return self._sorted_keys

    def lookup(self, texts: Sequence[str]) -> np.ndarray:
        """float32 [n, dim]: the teacher embedding of each text (normalised before lookup).

        Raises :class:`XdistillError` naming the first text that is not in the store.
        """
        return self.gather(self.row_ids(texts))

    def verify(self) -> None:
        """Re-hash every shard file against the checksums in the index (reads the whole store once); raises
        :class:`InputFileError` naming the first file whose bytes changed (rows shuffled, a bit flipped)."""
        for shard in self._shards:
            checks = [(shard.emb_file, shard.emb_blake2b), (shard.keys_file, shard.keys_blake2b)]
            for name, expected in checks:
                if expected is not None and file_blake2b(self.path / name) != expected:
                    raise InputFileError(
                        self.path / name,
                        "checksum does not match the store index (corrupt): delete the folder "
                        f"{self.path} and run `xdistill teacher-embed` again",
                    )

    @property
    def content_digest(self) -> str:
        """A digest of every vector and key the store holds (from the index's checksums: no file is read)."""
        parts = [f"{s.emb_blake2b}:{s.keys_blake2b or s.keys_bytes}" for s in self._shards]
        return hashlib.blake2b("|".join(parts).encode(), digest_size=16).hexdigest()


def read_index(index_path: Path) -> dict[str, Any]:
    """Parse and check a sub-store's ``index.json``."""
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InputFileError(index_path, "store index not found") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputFileError(index_path, f"store index is not valid JSON ({exc})") from exc
    if not isinstance(index, dict):
        raise InputFileError(index_path, "store index is not a JSON object")
    for field in ("format", "teacher_id", "dimension", "shards"):
        if field not in index:
            raise InputFileError(index_path, f"store index lacks '{field}'")
    if index["format"] != STORE_FORMAT:
        raise InputFileError(index_path, f"store format {index['format']!r}, this code reads {STORE_FORMAT}")
    if not isinstance(index["dimension"], int) or index["dimension"] <= 0:
        raise InputFileError(index_path, f"bad dimension {index['dimension']!r}")
    if not isinstance(index["shards"], list):
        raise InputFileError(index_path, "'shards' is not a list")
    return index


def _other_precisions_hint(root: Path, teacher_id: str) -> str:
    """What to tell a reader asking for one precision of a teacher the store holds in another ('' if none)."""
    base, _, _ = teacher_id.partition("+")
    found = [
        precision
        for precision in ("fp32", "fp16", "bf16")
        if with_precision(base, precision) != teacher_id
        and (root / substore_name(with_precision(base, precision)) / INDEX_FILE).is_file()
    ]
    if not found:
        return ""
    return (
        f"the store holds this teacher's vectors encoded in {' and '.join(found)}: read them with that "
        "teacher_embed.precision, or run `xdistill teacher-embed` with this one"
    )


def list_substores(root: str | Path) -> list[Path]:
    """The teacher sub-stores under a store root (those with an index), sorted by name."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.name.startswith(SUBSTORE_PREFIX) and (p / INDEX_FILE).is_file())


def teacher_fingerprint(teacher_spec: str, precision: str = "fp32") -> str:
    """The teacher's identity as recorded in the store: its weights (:func:`xdistill.models.model_fingerprint`)
    and, when not fp32, the precision it encoded in (``teacher_embed.precision``), e.g. ``...@<hex>+fp16``.

    fp32 keeps the bare fingerprint, so stores written before the precision existed stay valid; another
    precision is another sub-store, and neither store ever serves one precision's vectors to the other.
    """
    from xdistill.models import model_fingerprint
    from xdistill.models.precision import check_precision

    check_precision(precision, "teacher_embed.precision")
    return with_precision(model_fingerprint(teacher_spec), precision)


def with_precision(fingerprint: str, precision: str) -> str:
    """A teacher fingerprint's store identity in ``precision`` (see :func:`teacher_fingerprint`)."""
    return fingerprint if precision == "fp32" else f"{fingerprint}+{precision}"
