"""Size and speed of a student folder: what the registry and RESULTS.md show beside its scores.

One measurement for everyone (the ``register`` stage, ``python -m bench.quality``): parameters, size on
disk, output dimension, float32 index size per million sentences, and CPU encoding speed of
``SentenceTransformer.encode`` over the first :data:`SPEED_SENTENCES` English FLORES devtest
sentences (batch 64, after a warm-up batch), with torch's thread count recorded beside it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SPEED_SENTENCES = 512
# Staged by the corpora stage for every configuration (FLORES-200 devtest, English side).
SPEED_FILE = Path("data/raw/eval/flores200-devtest/eng_Latn.devtest")


def speed_sentences(path: str | Path = SPEED_FILE, count: int = SPEED_SENTENCES) -> list[str]:
    """The first ``count`` non-empty lines of ``path`` (empty when the file is missing)."""
    path = Path(path)
    if not path.is_file():
        return []
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return lines[:count]


def student_facts(student_dir: str | Path, sentences: Sequence[str]) -> dict[str, Any]:
    """Dimension, parameters, size on disk and (given ``sentences``) CPU encoding speed of a student folder."""
    import torch
    from sentence_transformers import SentenceTransformer

    student_dir = Path(student_dir)
    model = SentenceTransformer(str(student_dir), device="cpu", local_files_only=True)
    dimension = model.get_embedding_dimension()
    assert dimension is not None  # a student folder ends in Pooling (or Dense), which fixes its dimension
    dimension = int(dimension)
    size = sum(p.stat().st_size for p in student_dir.rglob("*") if p.is_file())
    facts: dict[str, Any] = {
        "dimension": dimension,
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "size_mb": round(size / 2**20, 1),
        "index_mb_per_million": round(dimension * 4 * 1_000_000 / 2**20, 1),
        "threads": torch.get_num_threads(),
    }
    if sentences:
        model.encode(list(sentences[:32]), batch_size=32)  # warm-up
        start = time.perf_counter()
        model.encode(list(sentences), batch_size=64)
        facts["sentences_per_second"] = round(len(sentences) / (time.perf_counter() - start), 1)
        facts["speed_sentences"] = len(sentences)
    else:
        log.warning("no speed sentences (%s missing): the student's encoding speed is not measured", SPEED_FILE)
    return facts
