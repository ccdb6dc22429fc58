"""The teacher-space benchmark (teacher(English) against model(translation)) as an
:class:`~xdistill.evaluation.evaluator.Evaluator`: does the model live in the teacher's space?"""

from __future__ import annotations

from typing import Any

from xdistill.evaluation.dev import dev_pairs_by_language
from xdistill.evaluation.encoding import CachedEncoder
from xdistill.evaluation.evaluator import BenchmarkResult, EvaluationContext, Evaluator
from xdistill.evaluation.metrics import mean_or_nan, paired_cosine, spearman_x100
from xdistill.evaluation.stsb_evaluator import stsb_sets
from xdistill.evaluation.tatoeba import read_tatoeba_pairs, tatoeba_scores
from xdistill.evaluation.tatoeba_evaluator import tatoeba_codes


def _retrieval_in_teacher_space(
    model: CachedEncoder, teacher: CachedEncoder, translations: list[str], english: list[str]
) -> dict[str, float]:
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
    saved with a teacher-space adapter (:mod:`xdistill.adapter.model`) is scored twice: its
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
            scores["dev"] = _summarise(
                {lang: _retrieval_in_teacher_space(model, teacher, xx, en) for lang, (en, xx) in pairs.items()}
            )
        scores["sts"] = self._cross_model_sts(model, teacher, context)
        return BenchmarkResult(scores, {"teacher": str(teacher.spec), "languages": languages, "model": str(model.spec)})

    @staticmethod
    def _flores(
        model: CachedEncoder, teacher: CachedEncoder, context: EvaluationContext, languages: list[str]
    ) -> dict[str, dict[str, float]]:
        from xdistill.mining.flores import flores_file, read_flores

        flores_dir = context.inputs.eval_dir / "flores200-devtest"
        english = read_flores(flores_file(flores_dir, "en"))
        return {
            lang: _retrieval_in_teacher_space(model, teacher, read_flores(flores_file(flores_dir, lang)), english)
            for lang in languages
            if flores_file(flores_dir, lang).is_file()
        }

    @staticmethod
    def _tatoeba(
        model: CachedEncoder, teacher: CachedEncoder, context: EvaluationContext
    ) -> dict[str, dict[str, float]]:
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
