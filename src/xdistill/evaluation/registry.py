"""The evaluators of the suite, in the order they run, and the loop that runs them on one model.

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

The groups a run may enable are :data:`xdistill.evaluation.settings.BENCHMARK_GROUPS` (plain data,
so the settings need no evaluator); importing this module checks that they are exactly the groups
of :data:`EVALUATORS`, in the same order.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from xdistill.evaluation.dev_pairs_evaluator import DevPairsEvaluator
from xdistill.evaluation.encoding import CachedEncoder
from xdistill.evaluation.evaluator import EvaluationContext, Evaluator
from xdistill.evaluation.mining_evaluator import MiningEvaluator
from xdistill.evaluation.settings import BENCHMARK_GROUPS
from xdistill.evaluation.sts17_evaluator import STS17Evaluator
from xdistill.evaluation.stsb_evaluator import STSbEvaluator
from xdistill.evaluation.tatoeba_evaluator import TatoebaEvaluator
from xdistill.evaluation.teacher_space_evaluator import TeacherSpaceEvaluator

logger = logging.getLogger(__name__)

EVALUATORS: tuple[Evaluator, ...] = (
    STS17Evaluator(),
    STSbEvaluator(),
    TatoebaEvaluator(),
    DevPairsEvaluator(),
    MiningEvaluator(),
    TeacherSpaceEvaluator(),
)


def check_groups(evaluators: tuple[Evaluator, ...], groups: tuple[str, ...]) -> None:
    """Raise unless ``groups`` are the evaluators' groups in their order: a setting no evaluator reads, or an
    evaluator no setting enables, is a mistake in the code."""
    found = tuple(dict.fromkeys(e.group for e in evaluators))
    if found != groups:
        raise RuntimeError(f"evaluation.settings.BENCHMARK_GROUPS {groups} differ from the evaluators' groups {found}")


check_groups(EVALUATORS, BENCHMARK_GROUPS)


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
