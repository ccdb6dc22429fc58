"""The encoding interface: what it hands back, and what it says when it had to cut a text."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from tests.lightweight_helpers import E5_SPEC
from xdistill.models import load_sentence_transformer
from xdistill.models.encoders import SentenceTransformerEncoder


@pytest.fixture(scope="module")
def encoder() -> SentenceTransformerEncoder:
    return SentenceTransformerEncoder(load_sentence_transformer(E5_SPEC), E5_SPEC)


def test_over_long_texts_are_counted_and_reported(encoder, caplog) -> None:
    """A 1 MB line used to be cut to its first 512 tokens without a word."""
    texts = ["A short sentence.", "word " * 200_000, "x" * 3000, "é" * 120]
    with caplog.at_level(logging.WARNING, logger="xdistill.models.encoders"):
        vectors = encoder.encode(texts)
    assert vectors.shape == (4, encoder.dimension)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert encoder.truncated == 2
    assert "2 of 4 texts are longer than the 512 tokens it reads" in caplog.text


def test_texts_that_fit_are_not_reported(encoder, caplog) -> None:
    before = encoder.truncated
    with caplog.at_level(logging.WARNING, logger="xdistill.models.encoders"):
        encoder.encode(["word " * 300, "Ein kurzer Satz."])  # ~300 tokens: fits in 512
    assert encoder.truncated == before and "longer than" not in caplog.text
