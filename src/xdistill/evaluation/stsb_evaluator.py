"""The STSb benchmarks (stsb-multi-mt: monolingual, cross-lingual, language bias) as one
:class:`~xdistill.evaluation.evaluator.Evaluator`: the three share their encodings."""

from __future__ import annotations

import logging

from xdistill.evaluation.bias import language_bias
from xdistill.evaluation.encoding import CachedEncoder
from xdistill.evaluation.evaluator import BenchmarkResult, EvaluationContext, Evaluator
from xdistill.evaluation.metrics import mean_or_nan
from xdistill.evaluation.sts import STSSet, build_stsb_sets, score_sts_sets

logger = logging.getLogger(__name__)


def stsb_sets(context: EvaluationContext) -> tuple[list[STSSet], list[STSSet]]:
    """The stsb-multi-mt test sets of the run's languages: (monolingual, cross-lingual)."""
    return build_stsb_sets(
        context.inputs.eval_dir / "stsb-multi-mt", context.settings.languages, context.settings.stsb_max_pairs
    )


class STSbEvaluator(Evaluator):
    """Cross-lingual and monolingual STSb (stsb-multi-mt) and the language bias over all those sets."""

    group = "stsb"
    english = True  # the English set (an English-only model's settings name no other language)

    def __call__(self, model: CachedEncoder, context: EvaluationContext) -> dict[str, BenchmarkResult]:
        monolingual, crosslingual = stsb_sets(context)
        mono_scores, mono_pred = score_sts_sets(model, monolingual)
        results = {
            "sts_monolingual": BenchmarkResult(
                {**mono_scores, "average": mean_or_nan(list(mono_scores.values()))},
                {"n_pairs": {s.name: len(s) for s in monolingual}},
            )
        }
        if not crosslingual:
            if context.settings.english_only:
                return results
            logger.warning("cross-lingual STSb: none of %s has a stsb-multi-mt file", context.settings.languages)
            return results
        cross_scores, cross_pred = score_sts_sets(model, crosslingual)
        results["sts_crosslingual"] = BenchmarkResult(
            {**cross_scores, "average": mean_or_nan(list(cross_scores.values()))},
            {"n_pairs": {s.name: len(s) for s in crosslingual}},
        )
        all_sets = monolingual + crosslingual
        bias = language_bias(
            [s.name for s in all_sets],
            [{**mono_pred, **cross_pred}[s.name] for s in all_sets],
            [s.gold for s in all_sets],
        )
        results["language_bias"] = BenchmarkResult(
            {k: bias[k] for k in ("expected", "actual", "difference")},
            {
                "sets": [s.name for s in all_sets],
                "per_set": bias["per_set"],
                "total_pairs": sum(len(s) for s in all_sets),
            },
        )
        return results
