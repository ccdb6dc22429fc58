"""The one interface every benchmark implements, in the style of sentence-transformers' evaluators.

An :class:`Evaluator` is called with the model under test (a :class:`CachedEncoder`) and the
:class:`EvaluationContext` of the run (settings, input folders, the teacher) and returns
``{benchmark name: BenchmarkResult}``: most evaluators produce one benchmark, some several that
share their encodings (STSb gives the monolingual, cross-lingual and language-bias tables).
Every result has the same shape, ``scores`` (nested numbers, 0-100 scale unless the key says
otherwise, e.g. ``mse_x100``) and ``info`` (counts, notes, settings), which is what
``data/baselines/*.json``, the report tables, the summary and the model registry read.

This module imports the run's settings (:mod:`xdistill.evaluation.settings`), never an evaluator or the
runner: the evaluators (one per ``*_evaluator.py``) implement it, :mod:`xdistill.evaluation.registry`
lists them and :mod:`xdistill.evaluation.suite` runs them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xdistill.evaluation.encoding import CachedEncoder
    from xdistill.evaluation.settings import EvaluationInputs, EvaluationSettings


@dataclass
class BenchmarkResult:
    """One benchmark's numbers for one model."""

    scores: dict[str, Any]
    info: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"scores": self.scores, "info": self.info}


@dataclass
class EvaluationContext:
    """What every evaluator of a run shares."""

    settings: EvaluationSettings
    inputs: EvaluationInputs
    teacher: CachedEncoder | None = None  # the English teacher (dev MSE, teacher-space benchmarks)


class Evaluator(ABC):
    """A benchmark (or a family of benchmarks sharing encodings) enabled by ``group`` in ``evaluate.benchmarks``."""

    group: str
    english: bool = False  # whether it scores English-only sets, all an English-only model is scored on

    def applies(self, context: EvaluationContext) -> bool:
        """Whether this run has the data and settings the benchmark needs."""
        settings = context.settings
        return self.group in settings.benchmarks and (self.english or not settings.english_only)

    @abstractmethod
    def __call__(self, model: CachedEncoder, context: EvaluationContext) -> dict[str, BenchmarkResult]:
        """Score ``model``: ``{benchmark name: result}``."""
