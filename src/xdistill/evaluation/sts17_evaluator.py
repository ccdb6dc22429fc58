"""The STS17 benchmark (SemEval-2017 official tracks) as an :class:`~xdistill.evaluation.evaluator.Evaluator`."""

from __future__ import annotations

from xdistill.evaluation.encoding import CachedEncoder
from xdistill.evaluation.evaluator import BenchmarkResult, EvaluationContext, Evaluator
from xdistill.evaluation.metrics import mean_or_nan
from xdistill.evaluation.sts import STS17_OUTSIDE_AVERAGE, is_monolingual_track, load_sts17, score_sts_sets

ENGLISH_TRACK = "en-en"


class STS17Evaluator(Evaluator):
    """STS17 official tracks; ``average`` over all tracks but 4b (reported on its own), also split into
    its monolingual (``xx-xx``) and cross-lingual (``xx-en``) tracks, the paper's Tables 1 and 2."""

    group = "sts17"
    english = True  # the en-en track

    def __call__(self, model: CachedEncoder, context: EvaluationContext) -> dict[str, BenchmarkResult]:
        tracks = load_sts17(context.inputs.eval_dir / "sts17", context.settings.sts17_max_pairs)
        if context.settings.english_only:
            tracks = [track for track in tracks if track.name == ENGLISH_TRACK]
        scores, _ = score_sts_sets(model, tracks)
        headline = {k: v for k, v in scores.items() if k not in STS17_OUTSIDE_AVERAGE}
        scores["average"] = mean_or_nan(list(headline.values()))
        scores["average_monolingual"] = mean_or_nan([v for k, v in headline.items() if is_monolingual_track(k)])
        crosslingual = [v for k, v in headline.items() if not is_monolingual_track(k)]
        if not context.settings.english_only:
            scores["average_crosslingual"] = mean_or_nan(crosslingual)
        notes = list(dict.fromkeys(note for track in tracks for note in track.notes))
        return {
            "sts17": BenchmarkResult(
                scores,
                {
                    "n_pairs": {t.name: len(t) for t in tracks},
                    "notes": notes,
                    "outside_average": list(STS17_OUTSIDE_AVERAGE),
                },
            )
        }
