"""The bitext mining benchmarks (BUCC protocol) as an :class:`~xdistill.evaluation.evaluator.Evaluator`.

Mining itself lives in :mod:`xdistill.mining` (:func:`xdistill.mining.bucc.evaluate_bitext_mining`);
this file scores a model with it on the FLORES-built benchmark and, when given, official BUCC.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xdistill.errors import XdistillError
from xdistill.evaluation.encoding import CachedEncoder
from xdistill.evaluation.evaluator import BenchmarkResult, EvaluationContext, Evaluator
from xdistill.evaluation.metrics import mean_or_nan


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
                raise XdistillError(
                    f"{inputs.bucc_dir}: evaluate.bucc_dir holds no BUCC files of the configured languages ({reasons})"
                )
        return results

    @staticmethod
    def _mine(model: CachedEncoder, context: EvaluationContext, folders: list) -> BenchmarkResult:
        from xdistill.mining.bucc import evaluate_bitext_mining

        settings = context.settings
        languages = [lang for lang in settings.languages if lang != "en"]
        runs = [
            evaluate_bitext_mining(
                model,
                folder,
                languages,
                k=settings.mining_k,
                margin=settings.mining_margin,
                retrieval=settings.mining_retrieval,
                batch_size=settings.batch_size,
            )
            for folder in folders
        ]
        metrics = ("f1", "precision", "recall")
        mined = [lang for lang in languages if all(lang in run["languages"] for run in runs)]
        scores: dict[str, Any] = {
            lang: {m: 100.0 * float(np.mean([run["languages"][lang][m] for run in runs])) for m in metrics}
            for lang in mined
        }
        scores["average"] = {m: mean_or_nan([scores[lang][m] for lang in mined]) for m in metrics}
        # every construction skips the same languages (one FLORES folder); details are the first construction's
        info = {
            "settings": runs[0]["settings"],
            "skipped": runs[0]["skipped"],
            "details": runs[0]["languages"],
            "folders": [str(f) for f in folders],
        }
        if len(runs) > 1:
            info["repeats"] = {lang: [100.0 * run["languages"][lang]["f1"] for run in runs] for lang in mined}
            info["notes"] = [
                f"mean over {len(runs)} constructions of the benchmark (seeds "
                f"{settings.mining_seed}-{settings.mining_seed + len(runs) - 1})"
            ]
        return BenchmarkResult(scores, info)
