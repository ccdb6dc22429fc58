"""The scores a promotion compares, read from the evaluation summary (``metrics/eval/summary.json``).

The evaluation stage writes ``primary_score`` (the documented headline number, defined by
:data:`xdistill.evaluation.report.PRIMARY_SCORE_DEFINITION`: the mean of the STS, retrieval and mining
task scores it measured, each also written as ``task_<name>``) and ``per_language``: for each
language either one score or a mapping ``benchmark -> score``. Each numeric leaf of
``per_language`` is one *language score* (``de`` or ``de.sts17``); the gate checks every one of
them for regressions. The same two numbers of the reference models evaluated beside the student
(the untrained student and the teacher, under ``models`` in the summary) travel with them, so the
gate can judge a candidate against its own starting point, not only against the champion. The names
of the measured tasks travel too: two primary scores over different tasks are not comparable; and so
does the evaluation ``protocol`` (languages, benchmarks, sample sizes, mining construction), the
evaluation settings the scores depend on: scores measured under two protocols are not comparable either.
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
REFERENCES_TAG = "xdistill.references"
TASKS_TAG = "xdistill.tasks"
PROTOCOL_TAG = "xdistill.protocol"
TASK_PREFIX = "task_"  # summary.json keys of the task scores the primary score averages
# the evaluation's reference models a candidate is also judged against (labels of summary.json "models")
BASE_LABEL = "student-untrained"
TEACHER_LABEL = "teacher"
REFERENCE_LABELS = (BASE_LABEL, TEACHER_LABEL)


@dataclass(frozen=True)
class Scores:
    """The headline score of one model and its per-language scores (higher is better)."""

    primary: float
    per_language: dict[str, float] = field(default_factory=dict)
    # the same scores of the reference models evaluated beside this one (untrained student, teacher)
    references: dict[str, Scores] = field(default_factory=dict)
    # the tasks the primary score averages (empty: not recorded, e.g. a version registered before the tag)
    tasks: tuple[str, ...] = ()
    # the evaluation settings the scores depend on (summary.json "protocol"; empty: not recorded)
    protocol: dict[str, Any] = field(default_factory=dict)

    def as_tags(self) -> dict[str, str]:
        """Model-version tags that carry these scores (the registry is the promotion's source of truth)."""
        tags = {
            PRIMARY_SCORE_TAG: repr(self.primary),
            PER_LANGUAGE_TAG: json.dumps(self.per_language, sort_keys=True),
        }
        if self.references:
            tags[REFERENCES_TAG] = json.dumps(
                {
                    label: {"primary": ref.primary, "per_language": ref.per_language}
                    for label, ref in sorted(self.references.items())
                },
                sort_keys=True,
            )
        if self.tasks:
            tags[TASKS_TAG] = json.dumps(list(self.tasks))
        if self.protocol:
            tags[PROTOCOL_TAG] = json.dumps(self.protocol, sort_keys=True)
        return tags

    @classmethod
    def from_tags(cls, tags: Mapping[str, str]) -> Scores | None:
        """Scores stored by :meth:`as_tags`, or None when the version carries none."""
        if PRIMARY_SCORE_TAG not in tags:
            return None
        per_language = json.loads(tags.get(PER_LANGUAGE_TAG) or "{}")
        references = {
            label: cls(float(ref["primary"]), {k: float(v) for k, v in ref.get("per_language", {}).items()})
            for label, ref in json.loads(tags.get(REFERENCES_TAG) or "{}").items()
        }
        tasks = tuple(str(task) for task in json.loads(tags.get(TASKS_TAG) or "[]"))
        protocol = json.loads(tags.get(PROTOCOL_TAG) or "{}")
        return cls(
            float(tags[PRIMARY_SCORE_TAG]), {k: float(v) for k, v in per_language.items()}, references, tasks, protocol
        )


def scores_from_summary(summary: Mapping[str, Any], source: str | Path = "summary.json") -> Scores | None:
    """Read :class:`Scores` from an evaluation summary mapping (see the module docstring).

    None when the summary has no finite primary score (e.g. a configuration without any
    headline benchmark): such a model can be registered but never promoted.
    """
    if not isinstance(summary, Mapping):
        raise InputFileError(
            source, f"expected a JSON object (primary_score, per_language, models), found {summary!r:.60}"
        )
    primary = summary.get("primary_score")
    if primary is not None and (isinstance(primary, bool) or not isinstance(primary, int | float)):
        raise InputFileError(source, f"'primary_score' must be a number, not {primary!r}")
    per_language = summary.get("per_language") or {}
    if not isinstance(per_language, Mapping):
        raise InputFileError(source, "'per_language' must map each language to a score or to {benchmark: score}")
    if primary is None or not math.isfinite(primary):
        return None
    models = summary.get("models") or {}
    if not isinstance(models, Mapping):
        raise InputFileError(source, "'models' must map each evaluated model's label to its scores")
    references = {}
    for label in REFERENCE_LABELS:
        model = models.get(label) or {}
        if not isinstance(model, Mapping):
            raise InputFileError(source, f"'models.{label}' must be an object with primary_score and per_language")
        value = model.get("primary_score")
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            references[label] = Scores(float(value), numeric_leaves(model.get("per_language") or {}))
    tasks = tuple(
        sorted(
            key[len(TASK_PREFIX) :]
            for key, value in summary.items()
            if key.startswith(TASK_PREFIX)
            and isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
        )
    )
    protocol = summary.get("protocol") or {}
    if not isinstance(protocol, Mapping):
        raise InputFileError(source, "'protocol' must map each evaluation setting to its value")
    return Scores(float(primary), numeric_leaves(per_language), references, tasks, dict(protocol))


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
