"""Registrations in progress, and the cleanup of registrations that crashed.

``register`` creates its model version *pending* (version tag ``xdistill.state=pending``) and marks it
``complete`` only once ``metrics/register.json`` is written: a process killed in between (SIGKILL, a lost
host) leaves a version nobody recorded. :func:`is_pending` versions are never judged by ``promote``.

The run and the version carry their owner (host, pid, the process's start time, when it started). The next
``register`` cleans what a dead owner left (:func:`clean_stale_registrations`): its pending versions, its
logged model and run artifacts (a student is hundreds of MB), and its run, marked FAILED and deleted. An
owner on this host is dead when its pid is gone or now belongs to another process (the start time
differs); the liveness of an owner on another host cannot be checked, so its registration counts as
crashed only after :data:`STALE_AFTER_S`. A concurrent registration that is still alive is never touched.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlflow import MlflowClient

log = logging.getLogger(__name__)

STATE_TAG = "xdistill.state"
PENDING = "pending"
COMPLETE = "complete"
ROLE_TAG = "xdistill.role"  # on the run: which stage created it
REGISTER_ROLE = "register"
HOST_TAG = "xdistill.owner.host"
PID_TAG = "xdistill.owner.pid"
PROCESS_START_TAG = "xdistill.owner.process_start"  # psutil's create_time: tells a reused pid apart
STARTED_AT_TAG = "xdistill.owner.started_at"  # epoch seconds
# A registration takes minutes; one on another host still pending after this long crashed.
STALE_AFTER_S = 12 * 3600.0
_START_TIME_SLACK_S = 1.0


def owner_tags() -> dict[str, str]:
    """Tags naming this process as the owner of a run or version."""
    import psutil

    return {
        HOST_TAG: socket.gethostname(),
        PID_TAG: str(os.getpid()),
        PROCESS_START_TAG: f"{psutil.Process().create_time():.3f}",
        STARTED_AT_TAG: f"{time.time():.3f}",
    }


def is_pending(tags: Mapping[str, str]) -> bool:
    """Whether a version is a registration not (yet) complete. Versions registered before the state tag
    existed have none: they are complete."""
    return tags.get(STATE_TAG) == PENDING


def owner_alive(tags: Mapping[str, str], created_ms: int | None = None, now: float | None = None) -> bool:
    """Whether the process that owns a run or version (its :func:`owner_tags`) may still be working on it."""
    import psutil

    now = time.time() if now is None else now
    if tags.get(HOST_TAG) == socket.gethostname() and tags.get(PID_TAG, "").isdigit():
        try:
            started = psutil.Process(int(tags[PID_TAG])).create_time()
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return False
        except psutil.AccessDenied:
            return True  # it exists; whose it is cannot be told
        recorded = _float(tags.get(PROCESS_START_TAG))
        return recorded is None or abs(started - recorded) <= _START_TIME_SLACK_S
    since = _float(tags.get(STARTED_AT_TAG))
    if since is None and created_ms is not None:
        since = created_ms / 1000
    return since is not None and now - since < STALE_AFTER_S


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def clean_stale_registrations(client: MlflowClient, model_name: str, experiment_id: str | None) -> list[str]:
    """Remove what crashed registrations left: pending versions of ``model_name`` and RUNNING register runs of
    ``experiment_id`` whose owner is dead. Returns what was removed (for logs); problems are logged, not raised
    (a leftover must not stop a new registration)."""
    from mlflow.exceptions import MlflowException

    cleaned: list[str] = []
    versions: list[Any] = []
    try:
        versions = list(client.search_model_versions(f"name = '{model_name}'"))
    except MlflowException:
        pass  # no such model yet
    for version in versions:
        tags = version.tags or {}
        if not is_pending(tags) or owner_alive(tags, version.creation_timestamp):
            continue
        if version.aliases:
            log.warning(
                "%s version %s is pending but holds %s: left in place", model_name, version.version, version.aliases
            )
            continue
        log.warning("cleaning %s version %s: its registration crashed (%s)", model_name, version.version, _owner(tags))
        discard_registration(client, model_name, str(version.version), version.run_id, logged_model_id(version))
        cleaned.append(f"{model_name} version {version.version}")
    if experiment_id is not None:
        runs = client.search_runs(
            [experiment_id], filter_string=f"attributes.status = 'RUNNING' and tags.`{ROLE_TAG}` = '{REGISTER_ROLE}'"
        )
        for run in runs:
            if owner_alive(run.data.tags, run.info.start_time):
                continue
            log.warning("cleaning run %s: its registration crashed (%s)", run.info.run_id, _owner(run.data.tags))
            discard_registration(client, model_name, None, run.info.run_id, None)
            cleaned.append(f"run {run.info.run_id}")
    return cleaned


def logged_model_id(version: Any) -> str | None:
    """The id of the logged model a version was registered from (``source`` ``models:/m-...``), if any."""
    model_id = getattr(version, "model_id", None)
    source = str(getattr(version, "source", "") or "")
    if not model_id and source.startswith("models:/m-"):
        model_id = source[len("models:/") :].split("/", 1)[0]
    return model_id or None


def _owner(tags: Mapping[str, str]) -> str:
    return f"pid {tags.get(PID_TAG, '?')} on {tags.get(HOST_TAG, '?')}"


def discard_registration(
    client: MlflowClient, model_name: str, version: str | None, run_id: str | None, model_id: str | None
) -> list[str]:
    """Delete a registration's version, its logged model(s) with their files, and its run (FAILED, its
    artifacts deleted, then deleted); returns what could not be removed. Each step goes on after a failed one."""
    problems: list[str] = []
    if version is not None:
        _attempt(problems, f"delete {model_name} version {version}", client.delete_model_version, model_name, version)
    model_ids = {model_id} if model_id else set()
    if run_id is not None:
        model_ids |= _logged_models_of_run(client, run_id, problems)
    for logged in sorted(model_ids):
        _attempt(problems, f"delete logged model {logged}", _delete_logged_model, client, logged)
    if run_id is not None:
        _attempt(problems, f"delete run {run_id}", _delete_run, client, run_id)
    for problem in problems:
        log.error("%s", problem)
    return problems


def _attempt(problems: list[str], what: str, function: Any, *args: Any) -> None:
    from mlflow.exceptions import MlflowException

    try:
        function(*args)
    except MlflowException as exc:
        if getattr(exc, "error_code", None) != "RESOURCE_DOES_NOT_EXIST":  # gone already: done
            problems.append(f"could not {what}: {exc}")
    except Exception as exc:  # the caller may be handling another failure: report, never raise over it
        problems.append(f"could not {what}: {exc}")


def _logged_models_of_run(client: MlflowClient, run_id: str, problems: list[str]) -> set[str]:
    try:
        run = client.get_run(run_id)
        models = client.search_logged_models(
            [run.info.experiment_id], filter_string=f"source_run_id = '{run_id}'", max_results=100
        )
        return {model.model_id for model in models}
    except Exception as exc:
        problems.append(f"could not list the logged models of run {run_id}: {exc}")
        return set()


def _delete_logged_model(client: MlflowClient, model_id: str) -> None:
    """Its files first (MLflow's delete only marks the record deleted), then the record."""
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    model = client.get_logged_model(model_id)
    if model.artifact_location:
        get_artifact_repository(model.artifact_location, client.tracking_uri).delete_artifacts()
    client.delete_logged_model(model_id)


def _delete_run(client: MlflowClient, run_id: str) -> None:
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    run = client.get_run(run_id)
    if run.info.status == "RUNNING":
        client.set_terminated(run_id, status="FAILED")
    if run.info.artifact_uri:
        get_artifact_repository(run.info.artifact_uri, client.tracking_uri).delete_artifacts()
    if run.info.lifecycle_stage != "deleted":
        client.delete_run(run_id)
