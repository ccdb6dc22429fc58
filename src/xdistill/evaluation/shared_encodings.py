"""Encodings shared across the evaluation stages: each distinct sentence is encoded once per model.

The ``baselines`` stage keeps what it embedded with the teacher and with the untrained student: the
vectors in ``<folder>/<label>.npy`` (float32 rows) and, in the same order, the sentences and the
model spec in ``<label>.json`` (this module owns the format). The later stages start from them:

- **the teacher**, whose vectors the start and the student are compared with, reuses its own as
  they are (the same model on the same sentences);
- **the start** is the untrained student with a head on top (``Dense``, then ``Normalize``), so its
  vector of a sentence is the stored untrained vector ``u`` put through that head::

      start(s) = normalize(W u(s) + b)

  Before any derived vector is used, the start model itself encodes a sample of the stored
  sentences (the longest ones first: truncation would show there) and every derived vector must
  match its encoded one within :data:`MATCH_TOLERANCE`. A start whose encoder is not the untrained
  student's (kept layers, LoRA, a trimmed vocabulary) fails that check and is encoded in full.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from xdistill.errors import InputFileError
from xdistill.io import atomic_path, write_json_atomic
from xdistill.vectors import l2_normalise

if TYPE_CHECKING:
    from xdistill.evaluation.encoding import CachedEncoder

logger = logging.getLogger(__name__)

FORMAT = "xdistill-encodings"
VERSION = 1
MATCH_TOLERANCE = 1e-4  # largest |derived - encoded| coordinate accepted (unit vectors; fp32 noise is ~1e-7)
PROBE_LONGEST = 24  # the longest stored sentences, encoded to check a derivation
PROBE_SPREAD = 24  # and this many more, evenly spread over the rest


@dataclass(frozen=True)
class StoredEncodings:
    """One model's stored encodings: its spec, the sentences and their vectors (row i embeds sentence i)."""

    spec: str
    sentences: list[str]
    vectors: np.ndarray

    def memo(self) -> dict[str, np.ndarray]:
        return dict(zip(self.sentences, self.vectors))


def save_encodings(encoder: CachedEncoder, folder: Path, label: str) -> None:
    """Write what ``encoder`` embedded so far as ``folder/<label>.npy`` and ``<label>.json`` (each atomically)."""
    sentences, vectors = encoder.memo_items()
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_path(folder / f"{label}.npy") as tmp:
        with tmp.open("wb") as handle:
            np.save(handle, vectors)
    info = {"format": FORMAT, "version": VERSION, "spec": encoder.spec, "rows": len(sentences), "sentences": sentences}
    write_json_atomic(folder / f"{label}.json", info)


def load_encodings(folder: Path, label: str) -> StoredEncodings | None:
    """The encodings :func:`save_encodings` wrote for ``label``; None when ``folder`` has none."""
    vectors_path, info_path = folder / f"{label}.npy", folder / f"{label}.json"
    if not info_path.is_file() or not vectors_path.is_file():
        return None
    try:
        info = json.loads(info_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputFileError(info_path, f"not the JSON of stored encodings ({exc})") from None
    if not isinstance(info, dict) or info.get("format") != FORMAT or not isinstance(info.get("sentences"), list):
        raise InputFileError(info_path, f"not a {FORMAT} file (no 'format' {FORMAT!r} with a 'sentences' list)")
    try:
        vectors = np.load(vectors_path, allow_pickle=False)
    except ValueError as exc:
        raise InputFileError(vectors_path, f"not a .npy matrix ({exc})") from None
    if vectors.ndim != 2 or len(vectors) != len(info["sentences"]):
        raise InputFileError(
            vectors_path, f"shape {vectors.shape} does not match the {len(info['sentences'])} sentences of {info_path}"
        )
    return StoredEncodings(str(info.get("spec", "")), info["sentences"], np.asarray(vectors, dtype=np.float32))


def reuse_teacher(teacher: CachedEncoder, folder: Path, label: str) -> int:
    """Give ``teacher`` the vectors the baselines stage stored for it; the number of sentences reused."""
    stored = load_encodings(folder, label)
    if stored is None or stored.spec != teacher.spec:
        logger.info("no stored encodings of %s in %s: it encodes what it needs", teacher.spec, folder)
        return 0
    teacher.prefill(stored.memo())
    return len(stored.sentences)


def derive_start(start: CachedEncoder, folder: Path, untrained_label: str) -> int:
    """Give ``start`` its vectors derived from the untrained student's stored ones, when its head allows it.

    Returns the number of sentences derived (0: none; the start then encodes every sentence itself).
    """
    stored = load_encodings(folder, untrained_label)
    model = getattr(start.encoder, "model", None)
    head = _head_modules(model) if model is not None else None
    if stored is None or head is None or not stored.sentences:
        logger.info("the start is encoded in full (no stored untrained encodings, or no Dense head to apply)")
        return 0
    derived = _through_head(head, stored.vectors)
    probe = _probe_rows(stored.sentences)
    encoded = start.encoder.encode([stored.sentences[i] for i in probe], batch_size=start.batch_size)
    gap = float(np.abs(np.asarray(encoded, dtype=np.float32) - derived[probe]).max())
    if gap > MATCH_TOLERANCE:
        logger.info("the start's encoder differs from the untrained student's (gap %.2g): encoded in full", gap)
        return 0
    start.prefill(dict(zip(stored.sentences, derived)))
    logger.info("start: %d vectors derived from the untrained student's (sample gap %.1g)", len(derived), gap)
    return len(derived)


def _head_modules(model: Any) -> list[Any] | None:
    """The modules from the Dense head on, when only Dense and Normalize modules follow it."""
    modules = list(model)
    names = [type(module).__name__ for module in modules]
    if "Dense" not in names:
        return None
    tail = modules[names.index("Dense") :]
    return tail if all(type(m).__name__ in ("Dense", "Normalize") for m in tail) else None


def _through_head(head: list[Any], vectors: np.ndarray, rows: int = 8192) -> np.ndarray:
    """``vectors`` through the head modules (sentence-transformers' feature dicts), unit rows."""
    import torch

    parameter = next((p for m in head for p in m.parameters()), None)
    device = parameter.device if parameter is not None else torch.device("cpu")
    dtype = parameter.dtype if parameter is not None else torch.float32
    out = []
    with torch.inference_mode():
        for first in range(0, len(vectors), rows):
            features = {
                "sentence_embedding": torch.as_tensor(vectors[first : first + rows], dtype=dtype, device=device)
            }
            for module in head:
                features = module(features)
            out.append(features["sentence_embedding"].float().cpu().numpy())
    return l2_normalise(np.concatenate(out))


def _probe_rows(sentences: list[str]) -> np.ndarray:
    """Rows checked against the model: the longest sentences and an even spread of the rest."""
    by_length = np.argsort([-len(s) for s in sentences], kind="stable")
    spread = np.linspace(0, len(sentences) - 1, num=min(PROBE_SPREAD, len(sentences))).astype(int)
    return np.unique(np.concatenate([by_length[:PROBE_LONGEST], spread]))
