"""Champion bookkeeping in the MLflow registry: :func:`promote`, :func:`rollback`, :func:`champion_history`.

:func:`promote` reads the candidate's and the champion's scores from their version tags, asks the gate
(:mod:`xdistill.registry.gate`) and moves the alias when it passes. A version whose registration has not
completed (:mod:`xdistill.registry.pending`) is never a candidate: without ``version`` the newest completed
one is judged, and naming a pending one is an error. The decision and its reasons are written as
tags on the candidate version (``promotion.decision``, ``promotion.reasons``,
``promotion.compared_to``). Each promotion appends the version to the registered model's
``<alias>_history`` tag (a JSON list, one per alias; a champion set by hand joins it before the candidate
that replaces it, or cuts it back when it is an earlier champion); :func:`rollback` pops it and moves the
alias back.

Promotions and rollbacks hold the promotion lock (:func:`xdistill.registry.store.promotion_lock`: a file
lock for a local store, the server's own lock for a tracking server, shared by every host) from reading
the champion to moving the alias, so two racing promotions are serialised: the second one is judged
against whatever the first left as champion, and a loser never ends up holding the alias.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from xdistill.errors import XdistillError
from xdistill.registry.gate import CHAMPION_ALIAS, GateDecision, PromoteConfig, format_gap, judge
from xdistill.registry.pending import PENDING, STATE_TAG, is_pending
from xdistill.registry.scores import Scores
from xdistill.registry.store import client_for, promotion_lock, resolve_tracking_uri

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities.model_registry import ModelVersion

log = logging.getLogger(__name__)

HISTORY_TAG_SUFFIX = "_history"  # <alias>_history: champion_history for the default alias
DECISION_TAG = "promotion.decision"
REASONS_TAG = "promotion.reasons"
TEACHER_GAP_TAG = "promotion.teacher_gap"  # English, candidate minus teacher: never waived silently
COMPARED_TO_TAG = "promotion.compared_to"
DECIDED_AT_TAG = "promotion.decided_at"
ROLLED_BACK_TAG = "promotion.rolled_back_at"
MAX_TAG_LENGTH = 5000  # MLflow's limit on a model-version tag value
PROMOTED = "promoted"
REFUSED = "refused"


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
        if is_pending(candidate_version.tags):
            raise XdistillError(
                f"{model_name} version {candidate} is a registration that has not completed (tag "
                f"{STATE_TAG}={PENDING}): it is never judged; the next `xdistill register` removes it if it crashed"
            )
        champion = _current_alias(client, model_name, config.alias)
        if champion == candidate:
            reasons = [f"version {candidate} already holds '{config.alias}'"]
            return PromotionResult(model_name, candidate, "already champion", reasons, champion, champion)
        champion_scores = None
        if champion is not None:
            champion_scores = Scores.from_tags(_get_version(client, model_name, champion).tags)
        decision = judge(
            Scores.from_tags(candidate_version.tags),
            champion_scores,
            config.margin,
            config.tolerance,
            config.compare_with,
            champion_version=champion,
            teacher_tolerance=config.teacher_tolerance,
        )
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
        _tag_decision(client, model_name, candidate, verdict, decision, champion)
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
            raise XdistillError(
                f"{model_name}: '{config.alias}' holds version {current}, which the gate never promoted "
                "(alias moved by hand?): set the alias yourself, rollback follows the gate's history only"
            )
        # the alias may have been moved back by hand to an earlier champion: roll back from there
        history = _cut_after(history, current)
        deleted = []
        while history and (history[-1] == current or not _version_exists(client, model_name, history[-1])):
            popped = history.pop()
            if popped != current:
                deleted.append(popped)
        if not history:
            gone = f" (earlier champions {', '.join(deleted)} were deleted)" if deleted else ""
            raise XdistillError(f"{model_name}: version {current} is the first champion{gone}, nothing to roll back to")
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
    return history[: len(history) - history[::-1].index(version)]


def _newest_version(client: MlflowClient, model_name: str) -> str:
    """The newest version whose registration completed (a pending one may be a crashed registration's)."""
    versions = [v for v in client.search_model_versions(f"name = '{model_name}'") if not is_pending(v.tags or {})]
    if not versions:
        raise XdistillError(f"registered model '{model_name}' has no completed versions (run the register stage)")
    return str(max(int(v.version) for v in versions))


def _get_version(client: MlflowClient, model_name: str, version: str) -> ModelVersion:
    from mlflow.exceptions import MlflowException

    try:
        return client.get_model_version(model_name, version)
    except MlflowException as exc:
        # only "not found" means no such version: a timeout, a 5xx or a locked database must not make the
        # gate skip a champion or rollback drop a good former champion from the history
        if _is_not_found(exc):
            raise XdistillError(f"registered model '{model_name}' has no version {version}") from exc
        raise


def _version_exists(client: MlflowClient, model_name: str, version: str) -> bool:
    try:
        _get_version(client, model_name, version)
    except XdistillError:
        return False
    return True


def _current_alias(client: MlflowClient, model_name: str, alias: str) -> str | None:
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


def _history(client: MlflowClient, model_name: str, alias: str) -> list[str]:
    tags = client.get_registered_model(model_name).tags
    return [str(v) for v in json.loads(tags.get(alias + HISTORY_TAG_SUFFIX) or "[]")]


def _write_history(client: MlflowClient, model_name: str, alias: str, history: list[str]) -> None:
    client.set_registered_model_tag(model_name, alias + HISTORY_TAG_SUFFIX, json.dumps(history))


def _tag_decision(
    client: MlflowClient, model_name: str, version: str, verdict: str, decision: GateDecision, champion: str | None
) -> None:
    tags = {
        DECISION_TAG: verdict,
        REASONS_TAG: "; ".join(decision.reasons)[:MAX_TAG_LENGTH],
        TEACHER_GAP_TAG: format_gap(decision.teacher_gap) or "none",
        COMPARED_TO_TAG: champion or "none",
        DECIDED_AT_TAG: _now(),
    }
    for key, value in tags.items():
        client.set_model_version_tag(model_name, version, key, value)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
