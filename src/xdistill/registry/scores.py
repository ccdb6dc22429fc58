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
from xdistill.evaluation.labels import TEACHER_LABEL, UNTRAINED_LABEL
from xdistill.registry.store import numeric_leaves

PRIMARY_SCORE_TAG = "xdistill.primary_score"
TASKS_TAG = "xdistill.tasks"
SCORE_TAG_PREFIX = "xdistill.score."  # + a language score's key: xdistill.score.de.sts17
REFERENCE_TAG_PREFIX = "xdistill.ref."  # + label.primary_score, label.score.<key>
PROTOCOL_TAG_PREFIX = "xdistill.protocol."  # + an evaluation setting
# the earlier form: JSON objects in single tags, still read (versions registered before the short tags)
PER_LANGUAGE_TAG = "xdistill.per_language"
REFERENCES_TAG = "xdistill.references"
PROTOCOL_TAG = "xdistill.protocol"
TASK_PREFIX = "task_"  # summary.json keys of the task scores the primary score averages
# the evaluation's reference models a candidate is also judged against (labels of summary.json "models")
REFERENCE_LABELS = (UNTRAINED_LABEL, TEACHER_LABEL)
ENGLISH = "en"  # the per-language key of the English score (STS17 en-en), all the English-only teacher has


@dataclass(frozen=True)
class Scores:
    """The headline score of one model and its per-language scores (higher is better)."""

    primary: float
    per_language: dict[str, float] = field(default_factory=dict)
    # the same scores of the reference models evaluated beside this one (untrained student, teacher); the
    # English-only teacher has English scores and a NaN primary score
    references: dict[str, Scores] = field(default_factory=dict)
    # the tasks the primary score averages (empty: not recorded, e.g. a version registered before the tag)
    tasks: tuple[str, ...] = ()
    # the evaluation settings the scores depend on (summary.json "protocol"; empty: not recorded)
    protocol: dict[str, Any] = field(default_factory=dict)

    def as_tags(self) -> dict[str, str]:
        """Model-version tags that carry these scores (the registry is the promotion's source of truth).

        One short value per tag, so the MLflow UI shows each in full: ``xdistill.score.de.sts17``, the
        references' ``xdistill.ref.teacher.primary_score`` and ``xdistill.ref.teacher.score.en``, the tasks as
        ``mining,retrieval,sts`` and each protocol setting as ``xdistill.protocol.<setting>`` (its JSON value).
        """
        tags = {PRIMARY_SCORE_TAG: repr(self.primary)}
        tags.update({SCORE_TAG_PREFIX + key: repr(value) for key, value in sorted(self.per_language.items())})
        for label, ref in sorted(self.references.items()):
            if math.isfinite(ref.primary):
                tags[f"{REFERENCE_TAG_PREFIX}{label}.primary_score"] = repr(ref.primary)
            tags.update(
                {f"{REFERENCE_TAG_PREFIX}{label}.score.{key}": repr(value) for key, value in ref.per_language.items()}
            )
        if self.tasks:
            tags[TASKS_TAG] = ",".join(self.tasks)
        for key, value in sorted(self.protocol.items()):
            tags[PROTOCOL_TAG_PREFIX + key] = json.dumps(value, sort_keys=True)
        return tags

    def as_dict(self) -> dict[str, Any]:
        """The scores as one JSON object (the registration run's ``xdistill/scores.json`` artifact)."""
        return {
            "primary_score": self.primary,
            "per_language": self.per_language,
            "references": {
                label: {
                    "primary_score": ref.primary if math.isfinite(ref.primary) else None,
                    "per_language": ref.per_language,
                }
                for label, ref in sorted(self.references.items())
            },
            "tasks": list(self.tasks),
            "protocol": self.protocol,
        }

    @classmethod
    def from_tags(cls, tags: Mapping[str, str]) -> Scores | None:
        """Scores stored by :meth:`as_tags` (or by its earlier form, JSON objects in single tags), or None when
        the version carries none."""
        if PRIMARY_SCORE_TAG not in tags:
            return None
        per_language = {k: float(v) for k, v in json.loads(tags.get(PER_LANGUAGE_TAG) or "{}").items()}
        references = {
            label: cls(float(ref["primary"]), {k: float(v) for k, v in ref.get("per_language", {}).items()})
            for label, ref in json.loads(tags.get(REFERENCES_TAG) or "{}").items()
        }
        ref_primary: dict[str, float] = {}
        ref_scores: dict[str, dict[str, float]] = {}
        protocol = json.loads(tags.get(PROTOCOL_TAG) or "{}")
        for key, value in tags.items():
            if key.startswith(SCORE_TAG_PREFIX):
                per_language[key[len(SCORE_TAG_PREFIX) :]] = float(value)
            elif key.startswith(PROTOCOL_TAG_PREFIX):
                protocol[key[len(PROTOCOL_TAG_PREFIX) :]] = json.loads(value)
            elif key.startswith(REFERENCE_TAG_PREFIX):
                label, _, rest = key[len(REFERENCE_TAG_PREFIX) :].partition(".")
                if rest == "primary_score":
                    ref_primary[label] = float(value)
                elif rest.startswith("score."):
                    ref_scores.setdefault(label, {})[rest[len("score.") :]] = float(value)
        for label in sorted(ref_primary.keys() | ref_scores.keys()):
            references[label] = cls(ref_primary.get(label, math.nan), ref_scores.get(label, {}))
        tasks_text = tags.get(TASKS_TAG) or ""
        tasks = (
            tuple(str(task) for task in json.loads(tasks_text))
            if tasks_text.startswith("[")
            else tuple(task for task in tasks_text.split(",") if task)
        )
        return cls(float(tags[PRIMARY_SCORE_TAG]), per_language, references, tasks, protocol)


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
        scores = numeric_leaves(model.get("per_language") or {})
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            references[label] = Scores(float(value), scores)
        elif scores:  # an English-only teacher: its English scores, no primary score
            references[label] = Scores(math.nan, scores)
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
