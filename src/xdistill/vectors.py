"""Embedding matrices as the rest of the package expects them: float32, 2-D, unit rows.

The one owner of these two checks, so the encoders, the k-NN search and the trainer's dev
metrics cannot drift apart (faiss accepts only C-contiguous float32; cosine = inner product
needs unit rows).
"""

from __future__ import annotations

import numpy as np

from xdistill.errors import XdistillError


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
