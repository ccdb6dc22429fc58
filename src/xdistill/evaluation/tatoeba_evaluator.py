"""The Tatoeba benchmark (LASER test set, both directions) as an :class:`~xdistill.evaluation.evaluator.Evaluator`."""

from __future__ import annotations

from typing import Any

from xdistill.evaluation.encoding import CachedEncoder
from xdistill.evaluation.evaluator import BenchmarkResult, EvaluationContext, Evaluator
from xdistill.evaluation.metrics import mean_or_nan
from xdistill.evaluation.tatoeba import available_codes, evaluate_tatoeba, tatoeba_code


def tatoeba_codes(context: EvaluationContext) -> tuple[list[str], list[str]]:
    """(codes of the configured languages that have a test file, codes to evaluate)."""
    available = available_codes(context.inputs.eval_dir / "tatoeba-laser")
    configured = [
        code
        for code in (tatoeba_code(lang) for lang in context.settings.languages if lang != "en")
        if code in available
    ]
    return configured, (available if context.settings.tatoeba_all else configured)


class TatoebaEvaluator(Evaluator):
    """Tatoeba per language; ``average`` over the configured languages, ``average_all`` over all 112."""

    group = "tatoeba"

    def __call__(self, model: CachedEncoder, context: EvaluationContext) -> dict[str, BenchmarkResult]:
        settings = context.settings
        configured, codes = tatoeba_codes(context)
        per_language = evaluate_tatoeba(
            model,
            context.inputs.eval_dir / "tatoeba-laser",
            codes,
            max_pairs=settings.tatoeba_max_pairs,
            batch_size=settings.batch_size,
        )
        scores: dict[str, Any] = {code: {k: v for k, v in r.items() if k != "n"} for code, r in per_language.items()}
        scores["average"] = mean_or_nan([per_language[c]["average"] for c in configured])
        if settings.tatoeba_all:
            scores["average_all"] = mean_or_nan([r["average"] for r in per_language.values()])
        return {
            "tatoeba": BenchmarkResult(
                scores,
                {
                    "n_pairs": {c: r["n"] for c, r in per_language.items()},
                    "configured": configured,
                    "all_languages": settings.tatoeba_all,
                },
            )
        }
