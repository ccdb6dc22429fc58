"""The held-out dev pairs benchmark (MSE to the teacher, retrieval) as an
:class:`~xdistill.evaluation.evaluator.Evaluator`."""

from __future__ import annotations

from typing import Any

from xdistill.evaluation.dev import dev_pairs_by_language, evaluate_dev
from xdistill.evaluation.encoding import CachedEncoder
from xdistill.evaluation.evaluator import BenchmarkResult, EvaluationContext, Evaluator
from xdistill.evaluation.metrics import mean_or_nan


class DevPairsEvaluator(Evaluator):
    """Held-out dev pairs: MSE to the teacher and translation accuracy per language, and averages."""

    group = "dev"

    def applies(self, context: EvaluationContext) -> bool:
        return super().applies(context) and context.inputs.dev_path is not None

    def __call__(self, model: CachedEncoder, context: EvaluationContext) -> dict[str, BenchmarkResult]:
        settings = context.settings
        assert context.inputs.dev_path is not None  # applies() checked
        pairs = dev_pairs_by_language(context.inputs.dev_path, settings.languages, settings.dev_max_pairs)
        per_language = evaluate_dev(model, context.teacher, pairs, settings.batch_size)
        scores: dict[str, Any] = {lang: {k: v for k, v in r.items() if k != "n"} for lang, r in per_language.items()}
        names = sorted({k for r in scores.values() for k in r})
        scores["average"] = {name: mean_or_nan([r[name] for r in per_language.values() if name in r]) for name in names}
        return {
            "dev": BenchmarkResult(
                scores,
                {
                    "n_pairs": {lang: r["n"] for lang, r in per_language.items()},
                    "teacher": str(getattr(context.teacher, "spec", None)),
                },
            )
        }
