"""Run every configured benchmark for one encoder and collect the results in one dict.

The result of :func:`evaluate_model` is what ``data/baselines/<label>.json`` holds and what the
report merges across models::

    {"label", "spec", "dimension", "seconds", "sentences_encoded", "sentences_reused",
     "english_only": true for an English-only model scored on the English sets alone (absent otherwise),
     "benchmarks": {name: {"scores": nested numbers (x 100), "info": counts, notes, settings}},
     "pca": 2-D projection of English FLORES sentences and their translations}

Benchmark names: ``sts17``, ``sts_crosslingual``, ``sts_monolingual``, ``language_bias``
(these three from the ``stsb`` setting), ``tatoeba``, ``dev``, ``mining_flores``, ``mining_bucc``,
``teacher_space`` (and ``teacher_space_adapter`` for a student saved with one); each is produced
by one evaluator of :data:`xdistill.evaluation.registry.EVALUATORS`. The settings and inputs of a
run are :mod:`xdistill.evaluation.settings`.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from xdistill.evaluation.encoding import CachedEncoder
from xdistill.evaluation.evaluator import EvaluationContext
from xdistill.evaluation.registry import run_evaluators
from xdistill.evaluation.settings import EvaluationInputs, EvaluationSettings

logger = logging.getLogger(__name__)


def evaluate_model(
    encoder: Any, label: str, settings: EvaluationSettings, inputs: EvaluationInputs, teacher: Any | None = None
) -> dict[str, Any]:
    """Every configured benchmark for ``encoder``; ``teacher`` (an encoder) enables the dev MSE."""
    started = time.perf_counter()
    cached = encoder if isinstance(encoder, CachedEncoder) else CachedEncoder(encoder, batch_size=settings.batch_size)
    if teacher is None or teacher is encoder or isinstance(teacher, CachedEncoder):
        teacher_cached = cached if teacher is encoder else teacher
    else:
        teacher_cached = CachedEncoder(teacher, settings.batch_size)
    benchmarks = run_evaluators(cached, EvaluationContext(settings, inputs, teacher_cached), label)
    return {
        "label": label,
        **({"english_only": True} if settings.english_only else {}),
        "spec": str(getattr(encoder, "spec", "")),
        "dimension": int(encoder.dimension),
        "benchmarks": benchmarks,
        "pca": run_pca(cached, settings, inputs),
        "sentences_encoded": cached.encoded,
        "sentences_reused": cached.reused,
        "seconds": round(time.perf_counter() - started, 1),
    }


def pca_sentences(eval_dir: Path, languages: list[str], count: int) -> tuple[list[str], list[str], list[int]]:
    """The first ``count`` FLORES devtest sentences in English and each language: (texts, languages, ids)."""
    from xdistill.mining.flores import flores_file, read_flores

    flores_dir = eval_dir / "flores200-devtest"
    texts: list[str] = []
    langs: list[str] = []
    ids: list[int] = []
    for lang in ["en", *[x for x in languages if x != "en"]]:
        path = flores_file(flores_dir, lang)
        if not path.is_file():
            continue
        sentences = read_flores(path)[:count]
        texts += sentences
        langs += [lang] * len(sentences)
        ids += list(range(len(sentences)))
    return texts, langs, ids


def project_2d(embeddings: np.ndarray) -> tuple[np.ndarray, list[float]]:
    """PCA to two dimensions (centred SVD): coordinates and the explained-variance shares."""
    centred = embeddings - embeddings.mean(axis=0, keepdims=True)
    _, singular, components = np.linalg.svd(centred, full_matrices=False)
    variance = singular**2
    share = (variance[:2] / max(variance.sum(), 1e-12)).tolist()
    return centred @ components[:2].T, share


def run_pca(encoder: CachedEncoder, settings: EvaluationSettings, inputs: EvaluationInputs) -> dict[str, Any] | None:
    """2-D PCA of English FLORES sentences and their translations (Figure 2 of Reimers & Gurevych)."""
    if settings.pca_sentences <= 0 or settings.english_only:  # the PCA shows translations
        return None
    texts, langs, ids = pca_sentences(inputs.eval_dir, settings.languages, settings.pca_sentences)
    if len(set(langs)) < 2:
        logger.warning("PCA plot: fewer than two FLORES languages available, skipped")
        return None
    coords, share = project_2d(encoder.encode(texts).astype(np.float64))
    return {
        "languages": langs,
        "sentence_ids": ids,
        "coords": np.round(coords, 5).tolist(),
        "explained_variance": share,
    }
