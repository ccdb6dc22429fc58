"""What a run leaves in the model registry and on its Prefect run page: the MLflow run linked both ways,
the promotion gate on the new model version, and, when the run fails unsaved, the version it
registered taken back out.

The ``register`` stage writes the MLflow run into the project's store (``XDISTILL_REGISTRY_ROOT``);
:func:`record_mlflow_run` links it on the Prefect run (link and markdown artifacts) and tags it with
the DVC experiment and the Prefect run; :func:`promote_task` runs the promotion gate.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import create_link_artifact, create_markdown_artifact
from prefect.runtime import flow_run

from flows.retries import retry_unless_refused

MLFLOW_UI_ENV = "XDISTILL_MLFLOW_UI_URL"
DEFAULT_MLFLOW_UI = "http://127.0.0.1:5000"


def mlflow_run_url(registration: dict[str, Any]) -> str:
    """Where the MLflow UI shows the run: the tracking server itself, else the local UI address."""
    uri = registration.get("tracking_uri", "")
    base = uri if uri.startswith(("http://", "https://")) else os.environ.get(MLFLOW_UI_ENV, DEFAULT_MLFLOW_UI)
    return f"{base.rstrip('/')}/#/experiments/{registration['experiment_id']}/runs/{registration['run_id']}"


def workspace_registration(workspace: Path, project: Path) -> dict[str, Any] | None:
    """The workspace's ``metrics/register.json`` with its store made absolute: a relative store URI is
    relative to the registry root, which the stages were pointed at (the project)."""
    from xdistill.registry.register import read_registration

    register_file = workspace / "metrics" / "register.json"
    return read_registration(register_file, project=project) if register_file.is_file() else None


def unregister_unsaved(
    workspace: Path, project: Path, committed: dict[str, Any] | None, lock_file: str | None = None
) -> list[str]:
    """The register stage ran in this run but the experiment was never saved: take the version back out,
    under the promotions' lock (``lock_file``: the project's ``promote.lock_file``, when set); what could not
    be removed (empty: nothing was left)."""
    registration = workspace_registration(workspace, project)
    if registration is None or registration == committed:
        return []  # nothing registered by this run (a committed register.json is another run's)
    from xdistill.registry.register import unregister

    log = get_run_logger()
    if problems := unregister(registration, lock_file):
        log.error("run failed after registration: %s", "; ".join(problems))
    else:
        log.warning(
            "run failed after registration: removed %s version %s",
            registration["model_name"],
            registration["model_version"],
        )
    return problems


@task(retries=2, retry_delay_seconds=5, retry_condition_fn=retry_unless_refused, task_run_name="record-mlflow-run")
def record_mlflow_run(workspace: str, project: str, exp_name: str, exp_rev: str) -> dict[str, Any]:
    """Link the MLflow run on the Prefect run, and the DVC experiment and Prefect run on the MLflow run."""
    from xdistill.registry.store import client_for

    registration = workspace_registration(Path(workspace), Path(project))
    if registration is None:
        raise RuntimeError(f"the register stage wrote no {Path(workspace) / 'metrics' / 'register.json'}")
    url = mlflow_run_url(registration)
    client = client_for(registration["tracking_uri"])
    client.set_tag(registration["run_id"], "dvc_experiment_rev", exp_rev)
    if flow_run.get_id():
        client.set_tag(registration["run_id"], "prefect_flow_run_id", flow_run.get_id())
    create_link_artifact(
        key="mlflow-run",
        link=url,
        link_text=f"MLflow run {registration['run_id']}",
        description="this run's metrics, plots and model in the MLflow UI",
    )
    create_markdown_artifact(
        key="distill-run",
        markdown=_run_markdown(registration, url, exp_name, exp_rev),
        description=f"DVC experiment {exp_name}, {registration['model_name']} version {registration['model_version']}",
    )
    get_run_logger().info(
        "MLflow run %s (%s), model %s version %s",
        registration["run_id"],
        url,
        registration["model_name"],
        registration["model_version"],
    )
    return registration


def _run_markdown(registration: dict[str, Any], url: str, exp_name: str, exp_rev: str) -> str:
    return "\n".join(
        [
            "# distill run",
            "",
            "| what | value |",
            "|---|---|",
            f"| MLflow run | [{registration['run_id']}]({url}) |",
            f"| tracking URI | `{registration['tracking_uri']}` |",
            f"| registered model | `{registration['model_uri']}` |",
            f"| DVC experiment | `{exp_name}` ({exp_rev[:7]}): `dvc exp apply {exp_name}` |",
        ]
    )


@task(
    retries=2,
    retry_delay_seconds=5,
    retry_condition_fn=retry_unless_refused,
    task_run_name="promote-{model_name}-v{version}",
)
def promote_task(model_name: str, version: str, tracking_uri: str, promote_params: dict[str, Any]) -> dict[str, Any]:
    """The promotion gate (xdistill.registry.promotion.promote) for the run's new version."""
    from xdistill.registry.gate import PromoteConfig
    from xdistill.registry.promotion import promote

    result = promote(model_name, version, tracking_uri=tracking_uri, config=PromoteConfig.from_params(promote_params))
    get_run_logger().info(
        "promotion of %s v%s: %s (%s)", model_name, version, result.decision, "; ".join(result.reasons)
    )
    create_markdown_artifact(
        key="promotion",
        description=f"{model_name} v{version}: {result.decision}",
        markdown="\n".join(
            [f"# {model_name} version {version}: {result.decision}", "", *(f"- {reason}" for reason in result.reasons)]
        ),
    )
    return result.as_dict()


def failure_markdown(exc: Exception, saved: bool, left: list[str] | None = None) -> str:
    """What the flow-run page's Artifacts tab says about a failed run (``left``: what the registry kept)."""
    if saved:
        kept = "The DVC experiment was saved before the failure."
    elif left:
        kept = "No DVC experiment was saved, but the model registry kept what this run registered: " + "; ".join(left)
    else:
        kept = (
            "No DVC experiment was saved and no model version was kept; the project and its params.yaml are unchanged."
        )
    return "\n".join(
        [
            # the message in a code block: paths keep their underscores (markdown would take them for emphasis)
            "# distill failed",
            "",
            f"**{type(exc).__name__}**:",
            "",
            "```text",
            str(exc),
            "```",
            "",
            kept,
            "The failing stage's whole output is in its task run (`stage-<name>`) and in the Logs tab.",
        ]
    )


def report_failure(name: str, exc: Exception, saved: bool, left: list[str]) -> None:
    """The failed run's markdown artifact (:func:`failure_markdown`) on its flow-run page."""
    create_markdown_artifact(
        key="distill-failure", markdown=failure_markdown(exc, saved, left), description=f"why {name} failed"
    )
