"""Tatoeba similarity search (LASER test set v1, Artetxe & Schwenk 2019): 112 languages vs English.

Line i of ``tatoeba.xxx-eng.xxx`` translates line i of ``tatoeba.xxx-eng.eng``. For each
language, every sentence looks up its nearest neighbour (cosine) among the other side's
sentences; accuracy is the share whose neighbour is its own translation, in both directions
(``xx->en`` and ``en->xx``), and their average. Files use ISO 639-3 codes (Mandarin is ``cmn``);
the project's ISO 639-1 codes are mapped through :mod:`xdistill.data.languages`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from xdistill.data.eval_formats import read_tatoeba_pairs
from xdistill.data.languages import placeholders
from xdistill.errors import XdistillError
from xdistill.mining.knn import retrieval_accuracy

logger = logging.getLogger(__name__)

_FILE_PATTERN = re.compile(r"^tatoeba\.([a-z]{3})-eng\.eng$")


def tatoeba_code(language: str) -> str:
    """The Tatoeba file code of a language: ISO 639-1 mapped (``zh`` -> ``cmn``), 3-letter codes as given."""
    if len(language) == 3:
        return language
    return placeholders(language)["lang3"]


def available_codes(tatoeba_dir: str | Path) -> list[str]:
    """Every language code with a ``tatoeba.xxx-eng.eng`` file, sorted."""
    folder = Path(tatoeba_dir)
    if not folder.is_dir():
        raise XdistillError(f"{folder}: Tatoeba (LASER) folder not found")
    return sorted(m.group(1) for p in folder.iterdir() if (m := _FILE_PATTERN.match(p.name)))


def tatoeba_scores(xx_embeddings: np.ndarray, en_embeddings: np.ndarray) -> dict[str, float]:
    """Accuracy x 100 in both directions and their average, for aligned embedding rows."""
    xx_to_en, en_to_xx = retrieval_accuracy(xx_embeddings, en_embeddings)
    return {"xx2en": 100.0 * xx_to_en, "en2xx": 100.0 * en_to_xx, "average": 50.0 * (xx_to_en + en_to_xx)}


def evaluate_tatoeba(
    encoder: Any,
    tatoeba_dir: str | Path,
    codes: Sequence[str],
    *,
    max_pairs: int | None = None,
    batch_size: int = 64,
) -> dict[str, dict[str, float]]:
    """Tatoeba accuracy per language code: ``{code: {xx2en, en2xx, average, n}}`` (accuracies x 100)."""
    results = {}
    for code in codes:
        xx_lines, en_lines = read_tatoeba_pairs(tatoeba_dir, code, max_pairs)
        scores = tatoeba_scores(
            encoder.encode(xx_lines, batch_size=batch_size), encoder.encode(en_lines, batch_size=batch_size)
        )
        results[code] = {**scores, "n": len(xx_lines)}
        logger.info("tatoeba %s (%d pairs): %.1f", code, len(xx_lines), scores["average"])
    return results
