"""The scores a promotion compares, read from the evaluation summary (``metrics/eval/summary.json``).

The evaluation stage writes ``primary_score`` (the documented headline number: the mean of the
STS17 and Tatoeba averages over the configured languages) and ``per_language``: for each
language either one score or a mapping ``benchmark -> score``. Each numeric leaf of
``per_language`` is one *language score* (``de`` or ``de.sts17``); the gate checks every one of
them for regressions.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xdistill.errors import InputFileError
from xdistill.registry.store import numeric_leaves

PRIMARY_SCORE_TAG = "xdistill.primary_score"
PER_LANGUAGE_TAG = "xdistill.per_language"


@dataclass(frozen=True)
class Scores:
    """The headline score of one model and its per-language scores (higher is better)."""

    primary: float
    per_language: dict[str, float] = field(default_factory=dict)

    def as_tags(self) -> dict[str, str]:
        """Model-version tags that carry these scores (the registry is the promotion's source of truth)."""
        return {
            PRIMARY_SCORE_TAG: repr(self.primary),
            PER_LANGUAGE_TAG: json.dumps(self.per_language, sort_keys=True),
        }

    @classmethod
    def from_tags(cls, tags: Mapping[str, str]) -> Scores | None:
        """Scores stored by :meth:`as_tags`, or None when the version carries none."""
        if PRIMARY_SCORE_TAG not in tags:
            return None
        per_language = json.loads(tags.get(PER_LANGUAGE_TAG) or "{}")
        return cls(float(tags[PRIMARY_SCORE_TAG]), {k: float(v) for k, v in per_language.items()})


def scores_from_summary(summary: Mapping[str, Any], source: str | Path = "summary.json") -> Scores | None:
    """Read :class:`Scores` from an evaluation summary mapping (see the module docstring).

    None when the summary has no finite primary score (e.g. a configuration without any
    headline benchmark): such a model can be registered but never promoted.
    """
    primary = summary.get("primary_score")
    if primary is not None and (isinstance(primary, bool) or not isinstance(primary, int | float)):
        raise InputFileError(source, f"'primary_score' must be a number, not {primary!r}")
    per_language = summary.get("per_language") or {}
    if not isinstance(per_language, Mapping):
        raise InputFileError(source, "'per_language' must map each language to a score or to {benchmark: score}")
    if primary is None or not math.isfinite(primary):
        return None
    return Scores(float(primary), numeric_leaves(per_language))


def read_summary_scores(path: str | Path) -> Scores | None:
    """Load :class:`Scores` from a ``summary.json`` file."""
    path = Path(path)
    if not path.is_file():
        raise InputFileError(path, "evaluation summary not found (run the evaluate stage first)")
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputFileError(path, f"invalid JSON: {exc.msg}", exc.lineno) from exc
    return scores_from_summary(summary, path)
