"""The promotion gate: which registered student carries the ``champion`` alias.

A candidate version becomes champion only if

1. it is not worse than the untrained student it was distilled from (``base``): its primary
   score is at least the base's, and no language score falls more than ``tolerance`` below the
   base's;
2. on English it is not worse than its teacher (``teacher``): each English score (``en``, or
   ``en.<benchmark>`` when scores are per benchmark) is at most ``tolerance`` below the teacher's;
3. its primary score beats the champion's by more than ``margin``, and no language score falls
   more than ``tolerance`` below the champion's (languages the champion was not evaluated on
   cannot regress). Both primary scores must average the same tasks (the ``xdistill.tasks`` tag:
   an evaluation without mining is on another scale) under the same evaluation protocol (the
   ``xdistill.protocol`` tag: languages, benchmarks, sample sizes, mining construction). With no
   champion yet, this check passes; a champion without scores (an alias set by hand) fails it.

In every check a language score the reference has and the candidate lacks fails the check (an
evaluation on fewer languages cannot show it is not worse on the others).

``promote.compare_with`` chooses which of ``base``, ``teacher`` and ``champion`` are checked (all by
default). The references' scores come from the evaluation that scored the candidate (they travel
as the ``xdistill.references`` tag); a candidate registered without them fails checks 1 and 2. The decision and its reasons are written as
tags on the candidate version (``promotion.decision``, ``promotion.reasons``,
``promotion.compared_to``). Each promotion appends the version to the registered model's
``<alias>_history`` tag (a JSON list, one per alias; a champion set by hand joins it before the candidate
that replaces it, or cuts it back when it is an earlier champion); :func:`rollback` pops it and moves the
alias back.

Promotions and rollbacks hold a file lock (see :func:`xdistill.registry.store.promotion_lock`)
from reading the champion to moving the alias, so two racing promotions are serialised: the
second one is judged against whatever the first left as champion, and a loser never ends up
holding the alias.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from xdistill.config import SECTION_CONFIG, parse_section
from xdistill.errors import XdistillError
from xdistill.registry.scores import BASE_LABEL, TEACHER_LABEL, Scores
from xdistill.registry.store import client_for, promotion_lock, resolve_tracking_uri

log = logging.getLogger(__name__)

CHAMPION_ALIAS = "champion"
HISTORY_TAG_SUFFIX = "_history"  # <alias>_history: champion_history for the default alias
DECISION_TAG = "promotion.decision"
REASONS_TAG = "promotion.reasons"
COMPARED_TO_TAG = "promotion.compared_to"
DECIDED_AT_TAG = "promotion.decided_at"
ROLLED_BACK_TAG = "promotion.rolled_back_at"
MAX_TAG_LENGTH = 5000  # MLflow's limit on a model-version tag value
PROMOTED = "promoted"
REFUSED = "refused"
COMPARISONS = ("base", "teacher", "champion")
ENGLISH = "en"


@dataclass(frozen=True)
class PromoteConfig:
    """The ``promote`` section of params.yaml."""

    __pydantic_config__ = SECTION_CONFIG

    margin: float = 0.0
    tolerance: float = 1.0
    alias: str = CHAMPION_ALIAS
    lock_file: str | None = None
    compare_with: tuple[str, ...] = COMPARISONS

    def __post_init__(self) -> None:
        for name in ("margin", "tolerance"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                # NaN would switch every comparison off (x < score - nan is always False)
                raise XdistillError(f"params promote.{name}: must be a finite number >= 0, got {value}")
        unknown = sorted(set(self.compare_with) - set(COMPARISONS))
        if unknown:
            raise XdistillError(f"params promote.compare_with: unknown {unknown}; choose from {list(COMPARISONS)}")

    @classmethod
    def from_params(cls, section: dict[str, Any] | None) -> PromoteConfig:
        """The section's settings; a null value means the default."""
        return parse_section(cls, section, "promote", null_is_default=True)


@dataclass(frozen=True)
class GateDecision:
    """The gate's verdict on one candidate, with human-readable reasons."""

    promote: bool
    reasons: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class PromotionResult:
    """What :func:`promote` did."""

    model_name: str
    candidate: str
    decision: str  # "promoted" | "refused" | "already champion"
    reasons: list[str]
    previous_champion: str | None
    champion: str | None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def judge(candidate: Scores | None, champion: Scores | None, margin: float, tolerance: float,
          compare_with: tuple[str, ...] = COMPARISONS, *, champion_version: str | None = None) -> GateDecision:
    """Apply the gate (module docstring) to a candidate's scores. ``champion`` None: there is none, unless
    ``champion_version`` names the version holding the alias (then it has no scores and the check fails)."""
    if candidate is None:
        return GateDecision(False, ["candidate has no evaluation scores (tag xdistill.primary_score)"])
    reasons: list[str] = []
    failed = False
    if "base" in compare_with:
        failed |= _check_reference(candidate, BASE_LABEL, "untrained student", tolerance, reasons, primary=True,
                                   languages=None)
    if "teacher" in compare_with:
        failed |= _check_reference(candidate, TEACHER_LABEL, "teacher", tolerance, reasons, primary=False,
                                   languages=(ENGLISH,))
    if "champion" in compare_with:
        if champion is None and champion_version is not None:
            reasons.append(f"champion version {champion_version} has no evaluation scores (alias set by hand?): "
                           "cannot show the candidate beats it; move the alias to a scored version first")
            failed = True
        elif champion is None:
            reasons.append(f"no champion yet: primary score {candidate.primary:.4f} becomes the reference")
        elif candidate.tasks and champion.tasks and candidate.tasks != champion.tasks:
            reasons.append(f"primary scores over different tasks (candidate: {', '.join(candidate.tasks)}; champion "
                           f"{champion_version}: {', '.join(champion.tasks)}): evaluate both with the same benchmarks")
            failed = True
        elif differing := _protocol_differences(candidate, champion):
            reasons.append(f"evaluated under another protocol than champion {champion_version} ({'; '.join(differing)}): "
                           "scores of other languages, samples or benchmarks are not comparable; evaluate both alike")
            failed = True
        else:
            gain = candidate.primary - champion.primary
            beats = gain > margin
            reasons.append(f"primary score {candidate.primary:.4f} vs champion {champion.primary:.4f}: "
                           f"{gain:+.4f} {'>' if beats else '<='} margin {margin:.4f}")
            regressions = _regressions(candidate, champion, "champion", tolerance, None)
            reasons.extend(regressions)
            failed |= _missing_scores(candidate, champion, "champion", None, reasons)
            failed |= not beats or bool(regressions)
    return GateDecision(not failed, reasons)


def _protocol_differences(candidate: Scores, champion: Scores) -> list[str]:
    """``setting: candidate's vs champion's`` for each evaluation setting the two differ in (none when either
    evaluation did not record its protocol: versions registered before the tag)."""
    if not candidate.protocol or not champion.protocol:
        return []
    keys = sorted(set(candidate.protocol) | set(champion.protocol))
    return [f"{key if key == 'languages' else 'evaluate.' + key}: {candidate.protocol.get(key)!r} vs "
            f"{champion.protocol.get(key)!r}" for key in keys if candidate.protocol.get(key) != champion.protocol.get(key)]


def _check_reference(candidate: Scores, label: str, name: str, tolerance: float, reasons: list[str], *,
                     primary: bool, languages: tuple[str, ...] | None) -> bool:
    """Append the comparison with one reference model to ``reasons``; True when the candidate fails it."""
    reference = candidate.references.get(label)
    if reference is None:
        reasons.append(f"no scores of the {name} ({label}) were registered with the candidate: cannot show it is not worse")
        return True
    failed = False
    if primary:
        below = candidate.primary < reference.primary
        reasons.append(f"primary score {candidate.primary:.4f} vs {name} {reference.primary:.4f}: "
                       f"{candidate.primary - reference.primary:+.4f}{' (below the ' + name + ')' if below else ''}")
        failed |= below
    regressions = _regressions(candidate, reference, name, tolerance, languages)
    if languages and not any(_of_languages(key, languages) for key in reference.per_language):
        reasons.append(f"{name}: no {'/'.join(languages)} score to compare")
    failed |= _missing_scores(candidate, reference, name, languages, reasons)
    reasons.extend(regressions)
    return failed or bool(regressions)


def _missing_scores(candidate: Scores, reference: Scores, name: str, languages: tuple[str, ...] | None,
                    reasons: list[str]) -> bool:
    """Append a reason and return True when the reference has language scores (of ``languages``) the
    candidate lacks: like a missing reference, nothing shows the candidate is not worse there."""
    missing = sorted(key for key in reference.per_language
                     if _of_languages(key, languages) and key not in candidate.per_language)
    if missing:
        reasons.append(f"{name}: the candidate has no {', '.join(missing)} score: cannot show it is not worse")
    return bool(missing)


def _of_languages(key: str, languages: tuple[str, ...] | None) -> bool:
    """Whether a language score's key (``en`` or ``en.sts17``, see :mod:`xdistill.registry.scores`) is
    one of ``languages`` (None: every language)."""
    return languages is None or key.split(".", 1)[0] in languages


def _regressions(candidate: Scores, reference: Scores, name: str, tolerance: float,
                 languages: tuple[str, ...] | None) -> list[str]:
    return [
        f"{key} regressed {candidate.per_language[key]:.4f} vs {name} {score:.4f} "
        f"({candidate.per_language[key] - score:+.4f}, tolerance {tolerance:.4f})"
        for key, score in sorted(reference.per_language.items())
        if _of_languages(key, languages) and key in candidate.per_language
        and candidate.per_language[key] < score - tolerance
    ]


def promote(
    model_name: str,
    version: str | int | None = None,
    *,
    tracking_uri: str | None = None,
    config: PromoteConfig | None = None,
) -> PromotionResult:
    """Run the gate for ``version`` (default: the newest) and move the alias if it passes."""
    config = config or PromoteConfig()
    tracking_uri = resolve_tracking_uri(tracking_uri)
    client = client_for(tracking_uri)
    with promotion_lock(tracking_uri, config.lock_file):
        candidate = str(version) if version is not None else _newest_version(client, model_name)
        if not candidate.isdigit():
            raise XdistillError(f"model version must be a number, got {candidate!r}")
        candidate_version = _get_version(client, model_name, candidate)
        champion = _current_alias(client, model_name, config.alias)
        if champion == candidate:
            reasons = [f"version {candidate} already holds '{config.alias}'"]
            return PromotionResult(model_name, candidate, "already champion", reasons, champion, champion)
        champion_scores = None
        if champion is not None:
            champion_scores = Scores.from_tags(_get_version(client, model_name, champion).tags)
        decision = judge(Scores.from_tags(candidate_version.tags), champion_scores, config.margin, config.tolerance,
                         config.compare_with, champion_version=champion)
        verdict = PROMOTED if decision.promote else REFUSED
        if decision.promote:
            before = _history(client, model_name, config.alias)
            _write_history(client, model_name, config.alias, _history_after(before, champion, candidate))
            try:
                client.set_registered_model_alias(model_name, config.alias, candidate)
            except BaseException:
                _write_history(client, model_name, config.alias, before)  # the alias did not move
                raise
        # after the alias move: a version tagged "promoted" holds (or held) the alias
        _tag_decision(client, model_name, candidate, verdict, decision.reasons, champion)
        new_champion = candidate if decision.promote else champion
    log.info("%s version %s %s: %s", model_name, candidate, verdict, "; ".join(decision.reasons))
    return PromotionResult(model_name, candidate, verdict, decision.reasons, champion, new_champion)


def rollback(
    model_name: str, *, tracking_uri: str | None = None, config: PromoteConfig | None = None
) -> tuple[str, str]:
    """Move the alias back to the previous champion; returns (demoted version, restored version)."""
    config = config or PromoteConfig()
    tracking_uri = resolve_tracking_uri(tracking_uri)
    client = client_for(tracking_uri)
    with promotion_lock(tracking_uri, config.lock_file):
        current = _current_alias(client, model_name, config.alias)
        if current is None:
            raise XdistillError(f"{model_name} has no '{config.alias}' to roll back")
        history = _history(client, model_name, config.alias)
        if current not in history:
            raise XdistillError(f"{model_name}: '{config.alias}' holds version {current}, which the gate never promoted "
                                "(alias moved by hand?): set the alias yourself, rollback follows the gate's history only")
        # the alias may have been moved back by hand to an earlier champion: roll back from there
        history = _cut_after(history, current)
        deleted = []
        while history and (history[-1] == current or not _version_exists(client, model_name, history[-1])):
            popped = history.pop()
            if popped != current:
                deleted.append(popped)
        if not history:
            gone = f" (earlier champions {', '.join(deleted)} were deleted)" if deleted else ""
            raise XdistillError(f"{model_name}: version {current} is the first champion{gone}, nothing to roll "
                                "back to")
        if deleted:
            log.warning("%s: skipping deleted former champions %s", model_name, ", ".join(deleted))
        previous = history[-1]
        client.set_registered_model_alias(model_name, config.alias, previous)
        _write_history(client, model_name, config.alias, history)
        client.set_model_version_tag(model_name, current, ROLLED_BACK_TAG, _now())
    log.info("%s: '%s' moved back from version %s to %s", model_name, config.alias, current, previous)
    return current, previous


def champion_history(model_name: str, *, tracking_uri: str | None = None, alias: str = CHAMPION_ALIAS) -> list[str]:
    """The versions the gate gave ``alias``, oldest first (the last one holds it unless moved by hand)."""
    return _history(client_for(resolve_tracking_uri(tracking_uri)), model_name, alias)


def _history_after(history: list[str], champion: str | None, candidate: str) -> list[str]:
    """The alias history once ``candidate`` replaces ``champion``: rollback must return to the version that
    really held the alias. One moved back by hand to an earlier champion cuts the history there (the versions
    after it were demoted by hand); one set by hand to a version the gate never promoted joins it."""
    if champion is None:
        return [*history, candidate]
    if champion in history:
        return [*_cut_after(history, champion), candidate]
    return [*history, champion, candidate]


def _cut_after(history: list[str], version: str) -> list[str]:
    """``history`` up to and including the last entry of ``version``, which it must hold."""
    return history[:len(history) - history[::-1].index(version)]


def _newest_version(client: Any, model_name: str) -> str:
    versions = client.search_model_versions(f"name = '{model_name}'")
    if not versions:
        raise XdistillError(f"registered model '{model_name}' has no versions (run the register stage)")
    return str(max(int(v.version) for v in versions))


def _get_version(client: Any, model_name: str, version: str) -> Any:
    from mlflow.exceptions import MlflowException

    try:
        return client.get_model_version(model_name, version)
    except MlflowException as exc:
        # only "not found" means no such version: a timeout, a 5xx or a locked database must not make the
        # gate skip a champion or rollback drop a good former champion from the history
        if _is_not_found(exc):
            raise XdistillError(f"registered model '{model_name}' has no version {version}") from exc
        raise


def _version_exists(client: Any, model_name: str, version: str) -> bool:
    try:
        _get_version(client, model_name, version)
    except XdistillError:
        return False
    return True


def _current_alias(client: Any, model_name: str, alias: str) -> str | None:
    """The version holding ``alias``, None when none does (read from the model's alias map: no error means
    "unset", any failure to read it is raised)."""
    from mlflow.exceptions import MlflowException

    try:
        model = client.get_registered_model(model_name)
    except MlflowException as exc:
        if _is_not_found(exc):
            raise XdistillError(f"registered model '{model_name}' not found (run the register stage)") from exc
        raise
    version = (model.aliases or {}).get(alias)
    return None if version is None else str(version)


def _is_not_found(exc: Exception) -> bool:
    return getattr(exc, "error_code", None) == "RESOURCE_DOES_NOT_EXIST"


def _history(client: Any, model_name: str, alias: str) -> list[str]:
    tags = client.get_registered_model(model_name).tags
    return [str(v) for v in json.loads(tags.get(alias + HISTORY_TAG_SUFFIX) or "[]")]


def _write_history(client: Any, model_name: str, alias: str, history: list[str]) -> None:
    client.set_registered_model_tag(model_name, alias + HISTORY_TAG_SUFFIX, json.dumps(history))


def _tag_decision(
    client: Any, model_name: str, version: str, verdict: str, reasons: list[str], champion: str | None
) -> None:
    tags = {
        DECISION_TAG: verdict,
        REASONS_TAG: "; ".join(reasons)[:MAX_TAG_LENGTH],
        COMPARED_TO_TAG: champion or "none",
        DECIDED_AT_TAG: _now(),
    }
    for key, value in tags.items():
        client.set_model_version_tag(model_name, version, key, value)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
