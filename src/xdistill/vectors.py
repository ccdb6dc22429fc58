"""Embedding matrices as the rest of the package expects them: float32, 2-D, unit rows; and the sidecar that
says what a vector file holds (:class:`VectorsInfo`, ``<file>.npy.json``; this module owns its format).

The one owner of these two checks, so the encoders, the k-NN search and the trainer's dev
metrics cannot drift apart (faiss accepts only C-contiguous float32; cosine = inner product
needs unit rows).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from xdistill.errors import XdistillError

logger = logging.getLogger(__name__)


def as_float32_matrix(array: np.ndarray, name: str = "embeddings") -> np.ndarray:
    """Return ``array`` as a C-contiguous float32 2-D matrix (faiss' only accepted input)."""
    matrix = np.ascontiguousarray(array, dtype=np.float32)
    if matrix.ndim != 2:
        raise XdistillError(f"{name} must be a 2-D matrix, got shape {matrix.shape}")
    return matrix


def l2_normalise(rows: np.ndarray) -> np.ndarray:
    """``rows`` as float32 with each row scaled to unit length (all-zero rows stay zero)."""
    rows = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.maximum(norms, np.float32(1e-12))


# --- the sidecar: what a vector file holds -------------------------------------------------------------------
#
# ``xdistill encode`` writes ``<file>.npy.json`` beside each ``<file>.npy``. A search compares the index's
# sidecar with what its queries will be, so vectors of two spaces are never compared silently (a teacher-space
# index searched with a student's own vectors runs without an error when both are 384-d, and returns wrong hits).

SIDECAR_FORMAT = "xdistill-vectors"
SIDECAR_VERSION = 1
OWN_SPACE = "own"  # the model's own output (a student's student space; a teacher's own, teacher space)
TEACHER_SPACE = "teacher-space"  # a student's output through its teacher-space adapter
SPACES = (OWN_SPACE, TEACHER_SPACE)


@dataclass(frozen=True)
class VectorsInfo:
    """What a vector file holds: which model wrote it, in which space, how many dimensions, whether unit rows.

    ``model`` is the spec as given; ``model_id`` its identity (``<spec>@<content digest>``, or
    ``models:/<name>/<version>@<digest>`` for a registered model); ``space_id`` the identity of the model whose
    space the vectors lie in: ``model_id`` for the model's own output, the adapter's teacher for teacher space.
    """

    model: str
    model_id: str
    space: str
    space_id: str
    dimension: int
    normalised: bool = True
    rows: int | None = None
    backend: str = "torch"

    def describe(self) -> str:
        where = "its own space" if self.space == OWN_SPACE else f"the teacher space of {self.space_id}"
        flag = " --teacher-space" if self.space == TEACHER_SPACE else ""
        return f"{self.dimension}-d vectors of --model {self.model}{flag}, in {where}"

    def as_dict(self) -> dict[str, Any]:
        return {"format": SIDECAR_FORMAT, "version": SIDECAR_VERSION, **asdict(self)}


def sidecar_path(npy_path: str | Path) -> Path:
    """``vectors.npy`` -> ``vectors.npy.json``."""
    path = Path(npy_path)
    return path.with_name(path.name + ".json")


def write_sidecar(npy_path: str | Path, info: VectorsInfo) -> Path:
    """Write the sidecar of ``npy_path`` atomically; returns its path."""
    from xdistill.io import write_json_atomic

    if info.space not in SPACES:
        raise ValueError(f"unknown vector space {info.space!r}")
    path = sidecar_path(npy_path)
    write_json_atomic(path, info.as_dict())
    return path


def read_sidecar(npy_path: str | Path) -> VectorsInfo | None:
    """The sidecar of ``npy_path`` (None, with a warning, when it has none); a clear error for a damaged one."""
    from xdistill.errors import InputFileError

    path = sidecar_path(npy_path)
    if not path.is_file():
        logger.warning(
            "%s has no sidecar %s: which model and space wrote it is unknown, so it is not checked against the "
            "queries (files written by `xdistill encode` have one)",
            npy_path,
            path.name,
        )
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(record, dict) or record.get("format") != SIDECAR_FORMAT:
            raise InputFileError(path, f'not an xdistill vector sidecar (no "format": "{SIDECAR_FORMAT}")')
        if int(record.get("version", 0)) > SIDECAR_VERSION:
            raise InputFileError(path, f"sidecar version {record['version']} is newer than this xdistill reads")
        fields = {name: record[name] for name in VectorsInfo.__dataclass_fields__ if name in record}
        info = VectorsInfo(**fields)
    except (UnicodeDecodeError, json.JSONDecodeError, TypeError, ValueError) as exc:
        raise InputFileError(path, f"unreadable vector sidecar ({exc})") from None
    if info.space not in SPACES:
        raise InputFileError(path, f"unknown vector space {info.space!r} (expected one of {', '.join(SPACES)})")
    return info


def check_sidecar_matches(npy_path: str | Path, info: VectorsInfo, shape: tuple[int, ...]) -> None:
    """Refuse a sidecar that describes another matrix than the one beside it (the .npy replaced by other means)."""
    from xdistill.errors import InputFileError

    rows, dimension = (shape[0], shape[1]) if len(shape) == 2 else (None, None)
    if dimension != info.dimension or (info.rows is not None and rows != info.rows):
        raise InputFileError(
            sidecar_path(npy_path),
            f"describes {info.rows} rows of {info.dimension}-d vectors, but {npy_path} holds shape {shape}: the "
            "sidecar belongs to an earlier file; encode the file again (or delete the sidecar to skip the check)",
        )


def same_space(a: str, b: str) -> bool:
    """Two space identities (``<spec>@<digest>`` or a bare spec) name the same space: equal digests where both
    have one (one model named two ways), else equal specs."""
    spec_a, _, digest_a = a.rpartition("@") if "@" in a else (a, "", "")
    spec_b, _, digest_b = b.rpartition("@") if "@" in b else (b, "", "")
    if digest_a and digest_b:
        return digest_a == digest_b
    return (spec_a or a) == (spec_b or b)


def check_same_space(
    index_path: str | Path, index: VectorsInfo, queries_path: str | Path, queries: VectorsInfo
) -> None:
    """Refuse to compare vectors of two spaces, naming both files, what each holds and the likely fix."""
    from xdistill.errors import XdistillError

    if same_space(index.space_id, queries.space_id) and index.dimension == queries.dimension:
        return
    hint = "embed both sides with one model, or the student with --teacher-space against its teacher's index"
    if queries.space == OWN_SPACE and index.space == TEACHER_SPACE:
        hint = "add --teacher-space to embed the queries through the student's teacher-space adapter"
    elif queries.space == OWN_SPACE and not same_space(index.model_id, queries.model_id):
        hint = (
            f"embed the queries with the index's model ({index.model}), or, if --model is a student distilled "
            "from it, add --teacher-space"
        )
    elif queries.space == TEACHER_SPACE and index.space == OWN_SPACE and same_space(index.model_id, queries.model_id):
        hint = "drop --teacher-space: the index holds the student's own vectors"
    raise XdistillError(
        f"{index_path} holds {index.describe()} (sidecar {sidecar_path(index_path).name}), but {queries_path} "
        f"would be embedded as {queries.describe()}: the two spaces differ; {hint}"
    )
