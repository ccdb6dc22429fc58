"""Every benchmark of the evaluation suite as an :class:`~xdistill.evaluation.base.Evaluator`.

=====================  ==================  =====================================================
evaluator              group (settings)    benchmarks it produces
=====================  ==================  =====================================================
STS17Evaluator         sts17               ``sts17``: official tracks, averages (4b apart)
STSbEvaluator          stsb                ``sts_monolingual``, ``sts_crosslingual``, ``language_bias``
TatoebaEvaluator       tatoeba             ``tatoeba``: LASER test set, both directions
DevPairsEvaluator      dev                 ``dev``: held-out pairs, MSE to the teacher, retrieval
MiningEvaluator        mining              ``mining_flores`` (and ``mining_bucc`` with official data)
TeacherSpaceEvaluator  teacher_space       ``teacher_space``: teacher(English) against model(translation)
                                           (and ``teacher_space_adapter``: the same for a student's adapter)
=====================  ==================  =====================================================
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from xdistill.errors import XdistillError
from xdistill.evaluation.base import BenchmarkResult, EvaluationContext, Evaluator
from xdistill.evaluation.bias import language_bias
from xdistill.evaluation.dev import dev_pairs_by_language, evaluate_dev
from xdistill.evaluation.encoding import CachedEncoder
from xdistill.evaluation.metrics import mean_or_nan, paired_cosine, spearman_x100
from xdistill.evaluation.sts import STS17_OUTSIDE_AVERAGE, STSSet, build_stsb_sets, is_monolingual_track, load_sts17
from xdistill.evaluation.tatoeba import available_codes, evaluate_tatoeba, read_tatoeba_pairs, tatoeba_code, tatoeba_scores

logger = logging.getLogger(__name__)


def _sts_predictions(model: CachedEncoder, sts_set: STSSet) -> np.ndarray:
    return paired_cosine(model.encode(sts_set.sentences1), model.encode(sts_set.sentences2))


def _score_sets(model: CachedEncoder, sets: list[STSSet]) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    predictions = {s.name: _sts_predictions(model, s) for s in sets}
    return {s.name: spearman_x100(predictions[s.name], s.gold) for s in sets}, predictions


def stsb_sets(context: EvaluationContext) -> tuple[list[STSSet], list[STSSet]]:
    """The stsb-multi-mt test sets of the run's languages: (monolingual, cross-lingual)."""
    return build_stsb_sets(context.inputs.eval_dir / "stsb-multi-mt", context.settings.languages,
                           context.settings.stsb_max_pairs)


class STS17Evaluator(Evaluator):
    """STS17 official tracks; ``average`` over all tracks but 4b (reported on its own), also split into
    its monolingual (``xx-xx``) and cross-lingual (``xx-en``) tracks, the paper's Tables 1 and 2."""

    group = "sts17"

    def __call__(self, model: CachedEncoder, context: EvaluationContext) -> dict[str, BenchmarkResult]:
        tracks = load_sts17(context.inputs.eval_dir / "sts17", context.settings.sts17_max_pairs)
        scores, _ = _score_sets(model, tracks)
        headline = {k: v for k, v in scores.items() if k not in STS17_OUTSIDE_AVERAGE}
        scores["average"] = mean_or_nan(list(headline.values()))
        scores["average_monolingual"] = mean_or_nan([v for k, v in headline.items() if is_monolingual_track(k)])
        scores["average_crosslingual"] = mean_or_nan([v for k, v in headline.items() if not is_monolingual_track(k)])
        notes = list(dict.fromkeys(note for track in tracks for note in track.notes))
        return {"sts17": BenchmarkResult(scores, {"n_pairs": {t.name: len(t) for t in tracks}, "notes": notes,
                                                  "outside_average": list(STS17_OUTSIDE_AVERAGE)})}


class STSbEvaluator(Evaluator):
    """Cross-lingual and monolingual STSb (stsb-multi-mt) and the language bias over all those sets."""

    group = "stsb"

    def __call__(self, model: CachedEncoder, context: EvaluationContext) -> dict[str, BenchmarkResult]:
        monolingual, crosslingual = stsb_sets(context)
        mono_scores, mono_pred = _score_sets(model, monolingual)
        results = {"sts_monolingual": BenchmarkResult({**mono_scores, "average": mean_or_nan(list(mono_scores.values()))},
                                                      {"n_pairs": {s.name: len(s) for s in monolingual}})}
        if not crosslingual:
            logger.warning("cross-lingual STSb: none of %s has a stsb-multi-mt file", context.settings.languages)
            return results
        cross_scores, cross_pred = _score_sets(model, crosslingual)
        results["sts_crosslingual"] = BenchmarkResult(
            {**cross_scores, "average": mean_or_nan(list(cross_scores.values()))},
            {"n_pairs": {s.name: len(s) for s in crosslingual}})
        all_sets = monolingual + crosslingual
        bias = language_bias([s.name for s in all_sets], [{**mono_pred, **cross_pred}[s.name] for s in all_sets],
                             [s.gold for s in all_sets])
        results["language_bias"] = BenchmarkResult(
            {k: bias[k] for k in ("expected", "actual", "difference")},
            {"sets": [s.name for s in all_sets], "per_set": bias["per_set"], "total_pairs": sum(len(s) for s in all_sets)})
        return results


def tatoeba_codes(context: EvaluationContext) -> tuple[list[str], list[str]]:
    """(codes of the configured languages that have a test file, codes to evaluate)."""
    available = available_codes(context.inputs.eval_dir / "tatoeba-laser")
    configured = [code for code in (tatoeba_code(lang) for lang in context.settings.languages if lang != "en")
                  if code in available]
    return configured, (available if context.settings.tatoeba_all else configured)


class TatoebaEvaluator(Evaluator):
    """Tatoeba per language; ``average`` over the configured languages, ``average_all`` over all 112."""

    group = "tatoeba"

    def __call__(self, model: CachedEncoder, context: EvaluationContext) -> dict[str, BenchmarkResult]:
        settings = context.settings
        configured, codes = tatoeba_codes(context)
        per_language = evaluate_tatoeba(model, context.inputs.eval_dir / "tatoeba-laser", codes,
                                        max_pairs=settings.tatoeba_max_pairs, batch_size=settings.batch_size)
        scores: dict[str, Any] = {code: {k: v for k, v in r.items() if k != "n"} for code, r in per_language.items()}
        scores["average"] = mean_or_nan([per_language[c]["average"] for c in configured])
        if settings.tatoeba_all:
            scores["average_all"] = mean_or_nan([r["average"] for r in per_language.values()])
        return {"tatoeba": BenchmarkResult(scores, {"n_pairs": {c: r["n"] for c, r in per_language.items()},
                                                    "configured": configured, "all_languages": settings.tatoeba_all})}


class DevPairsEvaluator(Evaluator):
    """Held-out dev pairs: MSE to the teacher and translation accuracy per language, and averages."""

    group = "dev"

    def applies(self, context: EvaluationContext) -> bool:
        return super().applies(context) and context.inputs.dev_path is not None

    def __call__(self, model: CachedEncoder, context: EvaluationContext) -> dict[str, BenchmarkResult]:
        settings = context.settings
        pairs = dev_pairs_by_language(context.inputs.dev_path, settings.languages, settings.dev_max_pairs)
        per_language = evaluate_dev(model, context.teacher, pairs, settings.batch_size)
        scores: dict[str, Any] = {lang: {k: v for k, v in r.items() if k != "n"} for lang, r in per_language.items()}
        names = sorted({k for r in scores.values() for k in r})
        scores["average"] = {name: mean_or_nan([r[name] for r in per_language.values() if name in r]) for name in names}
        return {"dev": BenchmarkResult(scores, {"n_pairs": {lang: r["n"] for lang, r in per_language.items()},
                                                "teacher": str(getattr(context.teacher, "spec", None))})}


class MiningEvaluator(Evaluator):
    """Bitext mining (BUCC protocol) on the FLORES-built benchmark and, when given, official BUCC.

    The FLORES benchmark is scored on each of its constructions (``evaluate.mining_repeats``) and
    every number is the mean over them; ``info.repeats`` keeps each construction's F1.
    """

    group = "mining"

    def __call__(self, model: CachedEncoder, context: EvaluationContext) -> dict[str, BenchmarkResult]:
        inputs = context.inputs
        results = {}
        if inputs.flores_mining_dirs:
            results["mining_flores"] = self._mine(model, context, list(inputs.flores_mining_dirs))
        if inputs.bucc_dir is not None:
            results["mining_bucc"] = self._mine(model, context, [inputs.bucc_dir])
            if not results["mining_bucc"].info["details"]:  # a folder set by hand that scores nothing is a mistake
                reasons = "; ".join(f"{lang}: {why}" for lang, why in results["mining_bucc"].info["skipped"].items())
                raise XdistillError(f"{inputs.bucc_dir}: evaluate.bucc_dir holds no BUCC files of the configured "
                                    f"languages ({reasons})")
        return results

    @staticmethod
    def _mine(model: CachedEncoder, context: EvaluationContext, folders: list) -> BenchmarkResult:
        from xdistill.mining.bucc import evaluate_bitext_mining

        settings = context.settings
        languages = [lang for lang in settings.languages if lang != "en"]
        runs = [evaluate_bitext_mining(model, folder, languages, k=settings.mining_k, margin=settings.mining_margin,
                                       retrieval=settings.mining_retrieval, batch_size=settings.batch_size)
                for folder in folders]
        metrics = ("f1", "precision", "recall")
        mined = [lang for lang in languages if all(lang in run["languages"] for run in runs)]
        scores: dict[str, Any] = {lang: {m: 100.0 * float(np.mean([run["languages"][lang][m] for run in runs]))
                                         for m in metrics} for lang in mined}
        scores["average"] = {m: mean_or_nan([scores[lang][m] for lang in mined]) for m in metrics}
        # every construction skips the same languages (one FLORES folder); details are the first construction's
        info = {"settings": runs[0]["settings"], "skipped": runs[0]["skipped"], "details": runs[0]["languages"],
                "folders": [str(f) for f in folders]}
        if len(runs) > 1:
            info["repeats"] = {lang: [100.0 * run["languages"][lang]["f1"] for run in runs] for lang in mined}
            info["notes"] = [f"mean over {len(runs)} constructions of the benchmark (seeds "
                             f"{settings.mining_seed}-{settings.mining_seed + len(runs) - 1})"]
        return BenchmarkResult(scores, info)


def _retrieval_in_teacher_space(model: CachedEncoder, teacher: CachedEncoder, translations: list[str],
                                english: list[str]) -> dict[str, float]:
    """Accuracy x 100 of model(translation) -> teacher(English) (``xx2en``), the reverse (``en2xx``) and their mean."""
    return tatoeba_scores(model.encode(translations), teacher.encode(english))


def _summarise(per_language: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Per-language scores plus ``average`` and ``min`` (the worst language and direction)."""
    scores: dict[str, Any] = dict(per_language)
    scores["average"] = mean_or_nan([r["average"] for r in per_language.values()])
    scores["min"] = min((min(r["xx2en"], r["en2xx"]) for r in per_language.values()), default=float("nan"))
    return scores


class TeacherSpaceEvaluator(Evaluator):
    """Does the model live in the teacher's space? (the reason distillation exists)

    A user who already indexed English text with the teacher wants to query that index with the
    model's embeddings of other languages, and the reverse. So the teacher embeds the English
    side, the model the other side:

    - ``flores``, ``tatoeba``, ``dev``: retrieval accuracy x 100 of model(translation) ->
      teacher(English) (``xx2en``) and teacher(English) -> model(translation) (``en2xx``), per
      language, their ``average`` and ``min`` (the worst language and direction);
    - ``sts``: cross-model STSb, Spearman x 100 of cos(teacher(English s1), model(translated s2))
      (``en-xx``) and of cos(model(translated s1), teacher(English s2)) (``xx-en``).

    A model whose dimension differs from the teacher's cannot share its index: no scores. A student
    saved with a teacher-space adapter (:mod:`xdistill.models.teacher_adapter`) is scored twice: its
    own output (``teacher_space``) and the adapter's (``teacher_space_adapter``, what
    ``xdistill encode --teacher-space`` gives users).
    """

    group = "teacher_space"

    def applies(self, context: EvaluationContext) -> bool:
        return super().applies(context) and context.teacher is not None

    def __call__(self, model: CachedEncoder, context: EvaluationContext) -> dict[str, BenchmarkResult]:
        teacher = context.teacher
        assert teacher is not None
        if model is teacher:
            return {}
        results = {"teacher_space": self._benchmark(model, teacher, context)}
        adapted = getattr(model, "teacher_space", None)  # the student's adapter output (--teacher-space)
        if adapted is not None:
            results["teacher_space_adapter"] = self._benchmark(adapted, teacher, context)
        return results

    def _benchmark(self, model: CachedEncoder, teacher: CachedEncoder, context: EvaluationContext) -> BenchmarkResult:
        if model.dimension != teacher.dimension:
            note = f"{model.dimension}-d model, {teacher.dimension}-d teacher: not in the teacher's space"
            return BenchmarkResult({}, {"notes": [note]})
        languages = [lang for lang in context.settings.languages if lang != "en"]
        scores: dict[str, Any] = {
            "flores": _summarise(self._flores(model, teacher, context, languages)),
            "tatoeba": _summarise(self._tatoeba(model, teacher, context)),
        }
        if context.inputs.dev_path is not None:
            pairs = dev_pairs_by_language(context.inputs.dev_path, languages, context.settings.dev_max_pairs)
            scores["dev"] = _summarise({lang: _retrieval_in_teacher_space(model, teacher, xx, en)
                                        for lang, (en, xx) in pairs.items()})
        scores["sts"] = self._cross_model_sts(model, teacher, context)
        return BenchmarkResult(scores, {"teacher": str(teacher.spec), "languages": languages, "model": str(model.spec)})

    @staticmethod
    def _flores(model: CachedEncoder, teacher: CachedEncoder, context: EvaluationContext,
                languages: list[str]) -> dict[str, dict[str, float]]:
        from xdistill.mining.flores import flores_file, read_flores

        flores_dir = context.inputs.eval_dir / "flores200-devtest"
        english = read_flores(flores_file(flores_dir, "en"))
        return {lang: _retrieval_in_teacher_space(model, teacher, read_flores(flores_file(flores_dir, lang)), english)
                for lang in languages if flores_file(flores_dir, lang).is_file()}

    @staticmethod
    def _tatoeba(model: CachedEncoder, teacher: CachedEncoder, context: EvaluationContext) -> dict[str, dict[str, float]]:
        configured, _ = tatoeba_codes(context)
        folder = context.inputs.eval_dir / "tatoeba-laser"
        results = {}
        for code in configured:
            xx, en = read_tatoeba_pairs(folder, code, context.settings.tatoeba_max_pairs)
            results[code] = _retrieval_in_teacher_space(model, teacher, xx, en)
        return results

    @staticmethod
    def _cross_model_sts(model: CachedEncoder, teacher: CachedEncoder, context: EvaluationContext) -> dict[str, float]:
        _, crosslingual = stsb_sets(context)
        scores = {}
        for sts_set in crosslingual:
            english_first = sts_set.name.startswith("en-")
            first = (teacher if english_first else model).encode(sts_set.sentences1)
            second = (model if english_first else teacher).encode(sts_set.sentences2)
            scores[sts_set.name] = spearman_x100(paired_cosine(first, second), sts_set.gold)
        scores["average"] = mean_or_nan(list(scores.values()))
        return scores


EVALUATORS: tuple[Evaluator, ...] = (STS17Evaluator(), STSbEvaluator(), TatoebaEvaluator(), DevPairsEvaluator(),
                                     MiningEvaluator(), TeacherSpaceEvaluator())
BENCHMARK_GROUPS = tuple(dict.fromkeys(e.group for e in EVALUATORS))


def run_evaluators(model: CachedEncoder, context: EvaluationContext, label: str) -> dict[str, dict[str, Any]]:
    """Every applicable evaluator on ``model``: ``{benchmark: {"scores", "info"}}``."""
    results: dict[str, dict[str, Any]] = {}
    for evaluator in EVALUATORS:
        if not evaluator.applies(context):
            continue
        started = time.perf_counter()
        results.update({name: result.as_dict() for name, result in evaluator(model, context).items()})
        logger.info("%s: %s done in %.0f s", label, evaluator.group, time.perf_counter() - started)
    return results
