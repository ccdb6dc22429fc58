"""Run every configured benchmark for one encoder and collect the results in one dict.

The result of :func:`evaluate_model` is what ``data/baselines/<label>.json`` holds and what the
report merges across models::

    {"label", "spec", "dimension", "seconds", "sentences_encoded",
     "benchmarks": {name: {"scores": nested numbers (x 100), "info": counts, notes, settings}},
     "pca": 2-D projection of English FLORES sentences and their translations}

Benchmark names: ``sts17``, ``sts_crosslingual``, ``sts_monolingual``, ``language_bias``
(these three from the ``stsb`` setting), ``tatoeba``, ``dev``, ``mining_flores``, ``mining_bucc``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from xdistill.errors import XdistillError
from xdistill.evaluation.bias import language_bias
from xdistill.evaluation.dev import dev_pairs_by_language, evaluate_dev
from xdistill.evaluation.encoding import CachedEncoder
from xdistill.evaluation.metrics import mean_or_nan, paired_cosine, spearman_x100
from xdistill.evaluation.sts import (
    STS17_OUTSIDE_AVERAGE,
    STSSet,
    build_stsb_sets,
    is_monolingual_track,
    load_sts17,
)
from xdistill.evaluation.tatoeba import available_codes, evaluate_tatoeba, tatoeba_code

logger = logging.getLogger(__name__)

BENCHMARK_GROUPS = ("sts17", "stsb", "tatoeba", "dev", "mining")


@dataclass
class EvaluationSettings:
    """The ``evaluate`` section of params.yaml plus the shared ``languages`` list."""

    languages: list[str]
    benchmarks: list[str] = field(default_factory=lambda: list(BENCHMARK_GROUPS))
    batch_size: int = 64
    sts17_max_pairs: int | None = None
    stsb_max_pairs: int | None = 300
    tatoeba_max_pairs: int | None = 1000
    tatoeba_all: bool = False
    dev_max_pairs: int | None = 200
    mining_flores: bool = True
    mining_seed: int = 13
    mining_gold_share: float = 0.05
    mining_k: int = 4
    mining_margin: str = "ratio"
    mining_retrieval: str = "max"
    bucc_dir: str | None = None
    pca_sentences: int = 12
    muse: bool = True

    @classmethod
    def from_params(cls, section: dict[str, Any] | None, languages: list[str]) -> EvaluationSettings:
        """Settings from the params section; unknown keys are an error (a typo would silently do nothing)."""
        section = dict(section or {})
        known = {f.name for f in fields(cls)} - {"languages"}
        unknown = sorted(set(section) - known)
        if unknown:
            raise XdistillError(f"params.yaml evaluate: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        settings = cls(languages=list(languages), **section)
        bad = sorted(set(settings.benchmarks) - set(BENCHMARK_GROUPS))
        if bad:
            raise XdistillError(f"params.yaml evaluate.benchmarks: unknown {', '.join(bad)}; choose from {', '.join(BENCHMARK_GROUPS)}")
        return settings

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class EvaluationInputs:
    """Where the benchmark data is: the staged eval tree and the prepared files of this run."""

    eval_dir: Path  # data/raw/eval (same layout as the mirror's eval/)
    dev_path: Path | None = None  # data/parallel/dev.tsv.gz
    flores_mining_dir: Path | None = None  # BUCC-layout benchmark built from FLORES by the caller
    bucc_dir: Path | None = None  # official BUCC 2017/2018 folder, when a user has it


def evaluate_model(
    encoder: Any, label: str, settings: EvaluationSettings, inputs: EvaluationInputs, teacher: Any | None = None
) -> dict[str, Any]:
    """Every configured benchmark for ``encoder``; ``teacher`` (an encoder) enables the dev MSE."""
    started = time.perf_counter()
    cached = CachedEncoder(encoder, batch_size=settings.batch_size)
    teacher_cached = cached if teacher is encoder else (CachedEncoder(teacher, settings.batch_size) if teacher else None)
    benchmarks: dict[str, dict[str, Any]] = {}
    runners = {
        "sts17": lambda: {"sts17": run_sts17(cached, settings, inputs)},
        "stsb": lambda: run_stsb(cached, settings, inputs),
        "tatoeba": lambda: {"tatoeba": run_tatoeba(cached, settings, inputs)},
        "dev": lambda: {"dev": run_dev(cached, teacher_cached, settings, inputs)} if inputs.dev_path else {},
        "mining": lambda: run_mining(cached, settings, inputs),
    }
    for group in settings.benchmarks:
        group_started = time.perf_counter()
        benchmarks.update(runners[group]())
        logger.info("%s: %s done in %.0f s", label, group, time.perf_counter() - group_started)
    return {
        "label": label,
        "spec": str(getattr(encoder, "spec", "")),
        "dimension": int(encoder.dimension),
        "benchmarks": benchmarks,
        "pca": run_pca(cached, settings, inputs),
        "sentences_encoded": cached.encoded,
        "seconds": round(time.perf_counter() - started, 1),
    }


def _sts_predictions(encoder: CachedEncoder, sts_set: STSSet) -> np.ndarray:
    return paired_cosine(encoder.encode(sts_set.sentences1), encoder.encode(sts_set.sentences2))


def _score_sets(encoder: CachedEncoder, sets: list[STSSet]) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    predictions = {s.name: _sts_predictions(encoder, s) for s in sets}
    return {s.name: spearman_x100(predictions[s.name], s.gold) for s in sets}, predictions


def run_sts17(encoder: CachedEncoder, settings: EvaluationSettings, inputs: EvaluationInputs) -> dict[str, Any]:
    """STS17 official tracks; ``average`` over all tracks but 4b (reported on its own), also split into
    its monolingual (``xx-xx``) and cross-lingual (``xx-en``) tracks."""
    tracks = load_sts17(inputs.eval_dir / "sts17", settings.sts17_max_pairs)
    scores, _ = _score_sets(encoder, tracks)
    headline_tracks = {k: v for k, v in scores.items() if k not in STS17_OUTSIDE_AVERAGE}
    scores["average"] = mean_or_nan(list(headline_tracks.values()))
    # The paper's two tables: same-language tracks (Table 1) and tracks across languages (Table 2).
    scores["average_monolingual"] = mean_or_nan([v for k, v in headline_tracks.items() if is_monolingual_track(k)])
    scores["average_crosslingual"] = mean_or_nan(
        [v for k, v in headline_tracks.items() if not is_monolingual_track(k)])
    notes = list(dict.fromkeys(note for track in tracks for note in track.notes))
    return {"scores": scores, "info": {"n_pairs": {t.name: len(t) for t in tracks}, "notes": notes,
                                       "outside_average": list(STS17_OUTSIDE_AVERAGE)}}


def run_stsb(encoder: CachedEncoder, settings: EvaluationSettings, inputs: EvaluationInputs) -> dict[str, Any]:
    """Cross-lingual and monolingual STSb (stsb-multi-mt) and the language bias over all those sets."""
    monolingual, crosslingual = build_stsb_sets(inputs.eval_dir / "stsb-multi-mt", settings.languages,
                                                settings.stsb_max_pairs)
    mono_scores, mono_pred = _score_sets(encoder, monolingual)
    results: dict[str, Any] = {
        "sts_monolingual": {"scores": {**mono_scores, "average": mean_or_nan(list(mono_scores.values()))},
                            "info": {"n_pairs": {s.name: len(s) for s in monolingual}}},
    }
    if not crosslingual:
        logger.warning("cross-lingual STSb: none of %s has a stsb-multi-mt file", settings.languages)
        return results
    cross_scores, cross_pred = _score_sets(encoder, crosslingual)
    results["sts_crosslingual"] = {"scores": {**cross_scores, "average": mean_or_nan(list(cross_scores.values()))},
                                   "info": {"n_pairs": {s.name: len(s) for s in crosslingual}}}
    all_sets = monolingual + crosslingual
    bias = language_bias([s.name for s in all_sets], [{**mono_pred, **cross_pred}[s.name] for s in all_sets],
                         [s.gold for s in all_sets])
    results["language_bias"] = {
        "scores": {k: bias[k] for k in ("expected", "actual", "difference")},
        "info": {"sets": [s.name for s in all_sets], "per_set": bias["per_set"],
                 "total_pairs": sum(len(s) for s in all_sets)},
    }
    return results


def tatoeba_codes(settings: EvaluationSettings, tatoeba_dir: Path) -> tuple[list[str], list[str]]:
    """(codes of the configured languages that have a test file, codes to evaluate)."""
    available = available_codes(tatoeba_dir)
    configured = [code for code in (tatoeba_code(lang) for lang in settings.languages if lang != "en")
                  if code in available]
    if settings.tatoeba_all:
        return configured, available
    return configured, configured


def run_tatoeba(encoder: CachedEncoder, settings: EvaluationSettings, inputs: EvaluationInputs) -> dict[str, Any]:
    """Tatoeba per language; ``average`` over the configured languages, ``average_all`` over all 112."""
    tatoeba_dir = inputs.eval_dir / "tatoeba-laser"
    configured, codes = tatoeba_codes(settings, tatoeba_dir)
    per_language = evaluate_tatoeba(encoder, tatoeba_dir, codes, max_pairs=settings.tatoeba_max_pairs,
                                     batch_size=settings.batch_size)
    scores: dict[str, Any] = {code: {k: v for k, v in r.items() if k != "n"} for code, r in per_language.items()}
    scores["average"] = mean_or_nan([per_language[c]["average"] for c in configured])
    if settings.tatoeba_all:
        scores["average_all"] = mean_or_nan([r["average"] for r in per_language.values()])
    return {"scores": scores, "info": {"n_pairs": {c: r["n"] for c, r in per_language.items()},
                                       "configured": configured, "all_languages": settings.tatoeba_all}}


def run_dev(encoder: CachedEncoder, teacher: CachedEncoder | None, settings: EvaluationSettings,
            inputs: EvaluationInputs) -> dict[str, Any]:
    """Held-out dev pairs: MSE to the teacher and translation accuracy per language, and averages."""
    pairs = dev_pairs_by_language(inputs.dev_path, settings.languages, settings.dev_max_pairs)
    per_language = evaluate_dev(encoder, teacher, pairs, settings.batch_size)
    scores: dict[str, Any] = {lang: {k: v for k, v in r.items() if k != "n"} for lang, r in per_language.items()}
    metric_names = sorted({k for r in scores.values() for k in r})
    scores["average"] = {name: mean_or_nan([r[name] for r in per_language.values() if name in r])
                         for name in metric_names}
    return {"scores": scores, "info": {"n_pairs": {lang: r["n"] for lang, r in per_language.items()},
                                       "teacher": str(getattr(teacher, "spec", None))}}


def run_mining(encoder: CachedEncoder, settings: EvaluationSettings, inputs: EvaluationInputs) -> dict[str, Any]:
    """Bitext mining (BUCC protocol) on the FLORES-built benchmark and, when given, official BUCC."""
    from xdistill.mining.bucc import evaluate_bitext_mining

    results = {}
    for name, folder in (("mining_flores", inputs.flores_mining_dir), ("mining_bucc", inputs.bucc_dir)):
        if folder is None:
            continue
        languages = [lang for lang in settings.languages if lang != "en"]
        mined = evaluate_bitext_mining(encoder, folder, languages, k=settings.mining_k, margin=settings.mining_margin,
                                       retrieval=settings.mining_retrieval, batch_size=settings.batch_size)
        scores: dict[str, Any] = {
            lang: {metric: 100.0 * m[metric] for metric in ("f1", "precision", "recall")}
            for lang, m in mined["languages"].items()
        }
        scores["average"] = {metric: 100.0 * value for metric, value in mined["average"].items()}
        results[name] = {"scores": scores, "info": {"settings": mined["settings"], "skipped": mined["skipped"],
                                                    "details": mined["languages"], "folder": str(folder)}}
    return results


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
    if settings.pca_sentences <= 0:
        return None
    texts, langs, ids = pca_sentences(inputs.eval_dir, settings.languages, settings.pca_sentences)
    if len(set(langs)) < 2:
        logger.warning("PCA plot: fewer than two FLORES languages available, skipped")
        return None
    coords, share = project_2d(encoder.encode(texts).astype(np.float64))
    return {"languages": langs, "sentence_ids": ids, "coords": np.round(coords, 5).tolist(),
            "explained_variance": share}
