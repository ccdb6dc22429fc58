"""Held-out dev parallel data: distance to the teacher and translation retrieval, per language.

For English sources s and translations t (``data/parallel/dev.tsv.gz``, never trained on):

- ``mse_source_x100`` = mean over elements of (teacher(s) - model(s))^2, x 100, and
  ``mse_translation_x100`` the same for model(t): the distillation objective itself, measured
  on unseen pairs (x 100 as sentence-transformers' MSEEvaluator reports it). Undefined when the
  model's dimension differs from the teacher's (e.g. mUSE, 512-d).
- ``accuracy_*``: nearest-neighbour translation retrieval among the language's dev pairs,
  both directions, x 100 (as Tatoeba).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from xdistill.data.parallel_tsv import read_parallel_pairs
from xdistill.data.sampling import evenly_spaced
from xdistill.evaluation.tatoeba import tatoeba_scores


def dev_pairs_by_language(
    dev_path: str | Path, languages: Sequence[str], max_pairs: int | None = None
) -> dict[str, tuple[list[str], list[str]]]:
    """``{lang: (sources, translations)}``: ``max_pairs`` dev pairs of each configured language, spread
    evenly over its pairs (the file lists a language's pairs corpus by corpus: the first ones would all
    come from one corpus)."""
    pairs = read_parallel_pairs(dev_path)
    grouped: dict[str, tuple[list[str], list[str]]] = {lang: ([], []) for lang in languages}
    for source, translation, lang in zip(pairs.sources, pairs.translations, pairs.langs):
        if lang in grouped:
            grouped[lang][0].append(source)
            grouped[lang][1].append(translation)
    subsets = {}
    for lang, (sources, translations) in grouped.items():
        rows = evenly_spaced(len(sources), max_pairs) if max_pairs is not None and sources else range(len(sources))
        if len(rows):
            subsets[lang] = ([sources[i] for i in rows], [translations[i] for i in rows])
    return subsets


def mse_x100(reference: np.ndarray, predicted: np.ndarray) -> float:
    """Mean squared element difference x 100."""
    return float(100.0 * np.mean((np.asarray(reference, np.float64) - np.asarray(predicted, np.float64)) ** 2))


def evaluate_dev(
    encoder: Any, teacher: Any | None, pairs: dict[str, tuple[list[str], list[str]]], batch_size: int = 64
) -> dict[str, dict[str, float]]:
    """Per language: MSE to the teacher (when dimensions match) and retrieval accuracy x 100."""
    results: dict[str, dict[str, float]] = {}
    for lang, (sources, translations) in pairs.items():
        source_emb = encoder.encode(sources, batch_size=batch_size)
        translation_emb = encoder.encode(translations, batch_size=batch_size)
        retrieval = tatoeba_scores(translation_emb, source_emb)
        scores = {
            "accuracy_xx2en": retrieval["xx2en"],
            "accuracy_en2xx": retrieval["en2xx"],
            "accuracy": retrieval["average"],
            "n": len(sources),
        }
        if teacher is not None and teacher.dimension == encoder.dimension:
            teacher_emb = teacher.encode(sources, batch_size=batch_size)
            scores["mse_source_x100"] = mse_x100(teacher_emb, source_emb)
            scores["mse_translation_x100"] = mse_x100(teacher_emb, translation_emb)
        results[lang] = scores
    return results
