"""The Prefect flow ``sweep``: the distill flow once per parameter set, their promotions compared.

Every member gets its own private workspace, so members never share a DVC workspace. With a
deployment (``sweep/cpu`` in prefect.yaml queues ``distill/cpu``) every member becomes its own flow
run, which any worker of the pool picks up; without one the members run one after another as
subflows of the sweep.
"""

from __future__ import annotations

import contextvars
import inspect
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from pydantic import MISSING

from flows.distill import distill
from flows.results import read_published_result
from flows.run_form import is_set


@flow(name="sweep")
def sweep(
    param_sets: list[dict[str, Any]],
    deployment: str | MISSING = MISSING,
    max_parallel: int = 1,
    promote: bool = True,
    project: str | MISSING = MISSING,
) -> list[dict[str, Any]]:
    """Run the distill flow once per parameter set and compare their promotions.

    Every member gets its own private workspace, so members never share a DVC workspace.

    Args:
        param_sets: One dict of distill parameters per run, e.g. [{"train_steps": 100}, {"train_steps": 200}].
        deployment: Run each member as a flow run of this deployment (e.g. distill/cpu), which any
            worker of its pool picks up; empty: one after another inside this run.
        max_parallel: Members running at once (with a deployment).
        promote: Run the promotion gate on each new model version.
        project: The project checkout (default: XDISTILL_PROJECT_ROOT or the worker's working directory).
    """
    log = get_run_logger()
    check_members(param_sets)
    shared = {"promote": promote, **({"project": project} if is_set(project) else {})}
    members = [{**shared, **member} for member in param_sets]
    if is_set(deployment):
        check_deployment(deployment)
        with ThreadPoolExecutor(max_workers=max(1, max_parallel)) as pool:
            # each member in a copy of this flow run's context: run_deployment links the member's flow run to
            # this one only when it finds a run context (the server cancels the members with the sweep), and
            # the members' logs go to this run
            futures = [
                pool.submit(contextvars.copy_context().run, _run_member, deployment, member) for member in members
            ]
            results = [future.result() for future in futures]
    else:
        results = [_run_subflow(member) for member in members]
    create_markdown_artifact(key="sweep", markdown=_sweep_markdown(param_sets, results))
    log.info("sweep of %d parameter sets done", len(results))
    return results


def check_members(param_sets: list[dict[str, Any]]) -> None:
    """Refuse a sweep naming a parameter the distill flow lacks before any member runs (a typo in the
    third member would otherwise end the sweep after two members' hours)."""
    known = set(inspect.signature(distill.fn).parameters)
    for number, member in enumerate(param_sets, 1):
        if unknown := sorted(set(member) - known):
            raise ValueError(
                f"param_sets member {number}: unknown distill parameter(s) {', '.join(unknown)}; "
                f"choose from {', '.join(sorted(known))}"
            )


def _run_subflow(parameters: dict[str, Any]) -> dict[str, Any]:
    """One sweep member inside this flow run; an error before its run starts is its result too."""
    try:
        state = distill(**parameters, return_state=True)
    except Exception as exc:  # e.g. a value the parameter's type refuses
        return {"failed": f"{type(exc).__name__}: {exc}", "flow_run": "subflow"}
    return _member_result(state, "subflow")


def _run_member(deployment: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """One sweep member as a flow run of ``deployment``; waits for it. A member the server refuses (a value
    outside the deployment's schema) is that member's failure, as in :func:`_run_subflow`."""
    from prefect.deployments import run_deployment
    from prefect.exceptions import PrefectHTTPStatusError

    try:
        run = run_deployment(deployment, parameters=parameters, timeout=None)
    except PrefectHTTPStatusError as exc:
        if exc.response.status_code not in (409, 422):  # only the server refusing this member's values
            raise
        return {"failed": f"refused by the server: {exc}", "flow_run": None}
    return _member_result(run.state, str(run.id))


def check_deployment(deployment: str) -> None:
    """Refuse a sweep whose deployment does not exist before any member runs (each would fail alike)."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            client.read_deployment_by_name(deployment)
        except ObjectNotFound:
            raise ValueError(f"deployment '{deployment}' not found (flow/deployment, e.g. distill/cpu)") from None


def _member_result(state: Any, flow_run_id: str) -> dict[str, Any]:
    """A member's result, or why it failed (a failed member does not stop the sweep)."""
    if state is None or not state.is_completed():
        return {"failed": state.message if state else "no state", "flow_run": flow_run_id}
    try:
        return state.result()
    except Exception as exc:  # persisted on the disk of the host that ran it: read its copy on the server
        published = read_published_result(flow_run_id) if flow_run_id != "subflow" else None
        if published is not None:
            return published
        get_run_logger().warning("sweep member %s: its result cannot be read here (%s)", flow_run_id, exc)
        return {"flow_run": flow_run_id, "state": state.name}


def _sweep_markdown(param_sets: list[dict[str, Any]], results: list[dict[str, Any]]) -> str:
    rows = ["| params | experiment | model version | promotion |", "|---|---|---|---|"]
    for member, result in zip(param_sets, results, strict=True):
        decision = (result.get("promotion") or {}).get("decision", result.get("failed", "-"))
        rows.append(
            f"| `{json.dumps(member)}` | {result.get('experiment', '-')} | "
            f"{result.get('model_version', '-')} | {decision} |"
        )
    return "# sweep\n\n" + "\n".join(rows)
