"""Embedding each distinct sentence once per model across all benchmarks of a run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from xdistill.models.encoders import Encoder

# a progress bar for batches at least this large (long encodings must show progress)
PROGRESS_BAR_MIN_SENTENCES = 1000


class CachedEncoder:
    """Wraps an encoder (``.encode``, ``.dimension``, ``.spec``) with a sentence -> vector memo.

    Benchmarks share many sentences (the English STSb side appears in every cross-lingual set,
    Tatoeba and FLORES English sides overlap across languages), so encoding each distinct
    sentence once saves a large share of a run's time. Output is identical to the wrapped
    encoder's up to batch composition (padding does not change a sentence's embedding).
    """

    def __init__(self, encoder: Encoder, batch_size: int = 64, show_progress_bar: bool = False) -> None:
        self.encoder = encoder
        self.spec = getattr(encoder, "spec", str(encoder))
        self.dimension = int(encoder.dimension)
        self.batch_size = batch_size
        self.show_progress_bar = show_progress_bar
        self._memo: dict[str, np.ndarray] = {}
        self.encoded = 0  # distinct sentences actually sent to the model
        self.reused = 0  # sentences whose vectors came from elsewhere (:meth:`prefill`)
        self._teacher_space: CachedEncoder | None = None

    @property
    def teacher_space(self) -> CachedEncoder | None:
        """The wrapped student's teacher-space output (its adapter applied to this memo's vectors), if it has one."""
        adapter = getattr(self.encoder, "teacher_adapter", None)
        if adapter is not None and self._teacher_space is None:
            from xdistill.adapter.model import TeacherSpaceEncoder

            self._teacher_space = CachedEncoder(TeacherSpaceEncoder(self, adapter), self.batch_size)
        return self._teacher_space

    def prefill(self, memo: Mapping[str, np.ndarray]) -> None:
        """Take vectors made elsewhere for these sentences (another stage's encodings of the same model)."""
        for text, vector in memo.items():
            if text not in self._memo:
                self._memo[text] = np.asarray(vector, dtype=np.float32)
                self.reused += 1

    def memo_items(self) -> tuple[list[str], np.ndarray]:
        """Every sentence embedded so far and its vector (row i embeds sentence i)."""
        sentences = list(self._memo)
        vectors = np.stack([self._memo[t] for t in sentences]) if sentences else np.zeros((0, self.dimension))
        return sentences, vectors.astype(np.float32, copy=False)

    def encode(
        self, texts: Sequence[str], batch_size: int | None = None, show_progress_bar: bool = False, **_: Any
    ) -> np.ndarray:
        """Embeddings of ``texts`` (float32 rows, in order), encoding only unseen sentences."""
        texts = list(texts)
        missing = list(dict.fromkeys(t for t in texts if t not in self._memo))
        if missing:
            vectors = np.asarray(
                self.encoder.encode(
                    missing,
                    batch_size=batch_size or self.batch_size,
                    show_progress_bar=self.show_progress_bar
                    or show_progress_bar
                    or len(missing) >= PROGRESS_BAR_MIN_SENTENCES,
                ),
                dtype=np.float32,
            )
            self._memo.update(zip(missing, vectors))
            self.encoded += len(missing)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.stack([self._memo[t] for t in texts])
