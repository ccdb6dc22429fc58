"""Prefect flows over the DVC pipeline: ``distill`` (one parametrised run), ``sweep``, ``stage``.

How a run stays reproducible without touching the user's checkout
-------------------------------------------------------------------
``distill`` never edits the project's ``params.yaml`` and never runs DVC in the project's
workspace. It

1. clones the project's last commit into a private workspace (a sibling folder of the project,
   so relative paths in params.yaml such as ``../shared/corpora`` still resolve) whose DVC cache
   *is* the project's cache, and checks the committed outputs out of it;
2. applies the flow parameters to the workspace's params.yaml with the ``dvc exp run -S``
   machinery (Hydra overrides, ``dvc.utils.hydra.apply_overrides``);
3. runs every DVC stage as its own task, ``Repo(workspace).reproduce(targets=[stage],
   single_item=True)`` in a child process, so dvc.lock stays right, stages already computed
   anywhere (same deps and params) come back from DVC's run cache, and the stage's output is
   streamed into the task's log;
4. saves the workspace as a DVC experiment (``dvc exp save``) and pushes the experiment ref into
   the project (``dvc exp push <project>``): ``dvc exp show`` lists it there and
   ``dvc exp apply <name>`` restores its params and outputs from the shared cache;
5. records the MLflow run (written by the ``register`` stage into the project's store, see
   ``XDISTILL_REGISTRY_ROOT``) on the Prefect run as a link and markdown artifact, and runs the
   promotion gate.

A failing stage fails its task and the flow with the stage's own error message; the private
workspace is deleted and no experiment is saved, so the project and the registry stay as they
were (the ``register`` stage undoes its own partial work).

GPU routing: Prefect runs a flow's tasks where the flow runs. ``gpu_deployment`` (e.g.
``stage/gpu``) sends the GPU stages (teacher_embed, train) as runs of the ``stage`` flow to the
``gpu`` work pool, which only GPU hosts poll; that needs ``workspace_parent`` on storage both
hosts see. Otherwise deploy the whole ``distill`` flow to the gpu pool (prefect.yaml).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from prefect import flow, get_run_logger, task
from prefect.artifacts import create_link_artifact, create_markdown_artifact
from prefect.runtime import flow_run

GPU_STAGES = ("teacher_embed", "train")
# Stages whose failures are mostly I/O (file copies, downloads, the MLflow store): retried.
IO_STAGES = {"corpora": 2, "register": 2}
REGISTRY_ROOT_ENV = "XDISTILL_REGISTRY_ROOT"  # xdistill.registry.store reads it
MLFLOW_UI_ENV = "XDISTILL_MLFLOW_UI_URL"
DEFAULT_MLFLOW_UI = "http://127.0.0.1:5000"
PROGRESS_LOG_INTERVAL_S = 5.0
ERROR_TAIL_LINES = 15


class StageFailed(RuntimeError):
    """A DVC stage exited with an error; the message carries the stage's own error lines."""


# ----------------------------------------------------------------------------------------------
# Plain helpers (no Prefect state): workspace, params, DVC child processes
# ----------------------------------------------------------------------------------------------


def project_root(path: str | None = None) -> Path:
    """The project checkout (a git + DVC repo): ``path``, ``XDISTILL_PROJECT_ROOT`` or the cwd."""
    root = Path(path or os.environ.get("XDISTILL_PROJECT_ROOT") or Path.cwd()).resolve()
    if not (root / "dvc.yaml").is_file() or not (root / ".git").exists():
        raise ValueError(f"{root}: not the xdistill project (needs dvc.yaml and a git repository)")
    return root


def tool_env(**extra: str) -> dict[str, str]:
    """Environment for child processes: this interpreter's bin first, every tool offline."""
    from xdistill.env import child_env

    return child_env(**extra)


def run_checked(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run a short tool command; raise with its output when it fails."""
    proc = subprocess.run(cmd, cwd=cwd, env=env or tool_env(), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()}")
    return proc.stdout.strip()


def dvc_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "dvc", *args]


def hydra_value(value: Any) -> str:
    """A Python value as a Hydra override value (what ``dvc exp run -S key=<value>`` accepts)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        # PyYAML reads 1e-05 as a string; 1.0e-05 is a float.
        mantissa, _, exponent = text.partition("e")
        return f"{mantissa}.0e{exponent}" if exponent and "." not in mantissa else text
    if isinstance(value, list | tuple):
        return "[" + ",".join(hydra_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{key}:{hydra_value(item)}" for key, item in value.items()) + "}"
    escaped = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'"


def param_overrides(
    languages: list[str] | None = None,
    teacher: str | None = None,
    student: str | None = None,
    train_steps: int | None = None,
    mirror: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> list[str]:
    """The flow parameters as ``-S`` overrides (``++key=value``: set, adding the key if new)."""
    chosen: dict[str, Any] = {}
    if languages is not None:
        chosen["languages"] = list(languages)
    if teacher is not None:
        chosen["models.teacher"] = teacher
    if student is not None:
        chosen["models.student"] = student
    if train_steps is not None:
        chosen["train.steps"] = int(train_steps)
    if mirror is not None:
        chosen["corpora.mirror"] = mirror
    chosen.update(overrides or {})
    return [f"++{key}={hydra_value(value)}" for key, value in chosen.items()]


def apply_param_overrides(params_file: Path, overrides: list[str]) -> None:
    """Apply ``-S`` overrides to a params file with DVC's own override parser and Hydra's merge.

    The same steps as ``dvc exp run -S`` (``dvc.utils.hydra.apply_overrides``), but the file is
    written back with PyYAML: DVC's writer emits YAML that the project's reader (PyYAML) takes
    differently (``1e-05`` becomes a string) or that DVC itself cannot re-read (a ``pypi:...``
    value inside a ``{...}`` mapping).
    """
    from dvc.utils.hydra import to_hydra_overrides
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from omegaconf import OmegaConf

    params = yaml.safe_load(params_file.read_text(encoding="utf-8")) or {}
    config = OmegaConf.create(params, flags={"allow_objects": True})
    OmegaConf.set_struct(config, True)
    ConfigLoaderImpl._apply_overrides_to_config(to_hydra_overrides(overrides), config)
    updated = OmegaConf.to_object(config)
    params_file.write_text(yaml.safe_dump(updated, sort_keys=False, allow_unicode=True), encoding="utf-8")


def experiment_name(requested: str | None) -> str:
    """A git-ref-safe DVC experiment name: the requested one, else from the Prefect run's name."""
    name = requested or f"prefect-{flow_run.get_name() or 'run'}-{(flow_run.get_id() or '')[:6]}"
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "prefect-run"


def existing_experiments(root: Path) -> set[str]:
    """Names of the DVC experiments stored in the project (refs/exps/<baseline>/<name>)."""
    refs = run_checked(["git", "for-each-ref", "--format=%(refname)", "refs/exps"], root)
    return {ref.rsplit("/", 1)[-1] for ref in refs.splitlines() if ref.count("/") >= 4}


def pipeline_stages(workspace: Path) -> list[str]:
    """The workspace's DVC stages in dependency order (DVC's own graph)."""
    out = run_checked([sys.executable, "-c", _STAGE_ORDER_SCRIPT], workspace)
    return json.loads(out)


_STAGE_ORDER_SCRIPT = """
import json, networkx as nx
from dvc.repo import Repo
with Repo(".") as repo:
    graph = repo.index.graph  # edges: stage -> the stages it depends on
    order = list(reversed(list(nx.topological_sort(graph))))
    print(json.dumps([s.name for s in order if getattr(s, "cmd", None)]))
"""

# Runs one stage through DVC's API in a child process (DVC installs signal handlers and the
# stage command writes to fd 1/2: a child keeps both away from the worker and lets us stream it).
_REPRODUCE_SCRIPT = """
import sys
from dvc.repo import Repo
from dvc.exceptions import DvcException
try:
    with Repo(".") as repo:
        stages = repo.reproduce(targets=[sys.argv[1]], single_item=True)
    print("xdistill-flow: reproduced", [s.addressing for s in stages] or "nothing (up to date)")
except DvcException as exc:
    cause = exc.__cause__
    print(f"dvc: {exc}" + (f": {cause}" if cause else ""), file=sys.stderr)
    sys.exit(1)
"""


def stream_stage(workspace: Path, stage: str, env: dict[str, str], log: Any) -> list[str]:
    """Reproduce ``stage`` in ``workspace``, logging its output as it comes; return the output lines."""
    proc = subprocess.Popen(
        [sys.executable, "-u", "-c", _REPRODUCE_SCRIPT, stage], cwd=workspace, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    last_progress = 0.0
    for line, is_progress in _split_output(proc.stdout):
        if not line.strip():
            continue
        lines.append(line)
        now = time.monotonic()
        # progress bars redraw with \r many times a second: log one every few seconds
        if not is_progress or now - last_progress >= PROGRESS_LOG_INTERVAL_S:
            log.info("[%s] %s", stage, line)
            last_progress = now if is_progress else last_progress
    if proc.wait() != 0:
        raise StageFailed(f"stage '{stage}' failed: {stage_error(lines)}")
    return lines


def _split_output(stream: Any) -> Iterator[tuple[str, bool]]:
    """Lines of a byte stream, split on \\n and \\r; the flag is True for \\r-ended (progress) lines."""
    buffer = b""
    while chunk := stream.read1(4096) if hasattr(stream, "read1") else stream.read(4096):
        buffer += chunk
        while match := re.search(rb"[\r\n]", buffer):
            end = match.start()
            yield buffer[:end].decode("utf-8", "replace"), buffer[end:end + 1] == b"\r"
            buffer = buffer[end + 1:]
    if buffer:
        yield buffer.decode("utf-8", "replace"), False


def stage_error(lines: list[str]) -> str:
    """The stage's own error message: its ``error:`` lines, else the tail of its output."""
    errors = [line.strip() for line in lines if line.lstrip().startswith("error:")]
    if errors:
        return " | ".join(dict.fromkeys(errors))
    return " | ".join(line.strip() for line in lines[-ERROR_TAIL_LINES:])


def mlflow_run_url(registration: dict[str, Any]) -> str:
    """Where the MLflow UI shows the run: the tracking server itself, else the local UI address."""
    uri = registration.get("tracking_uri", "")
    base = uri if uri.startswith(("http://", "https://")) else os.environ.get(MLFLOW_UI_ENV, DEFAULT_MLFLOW_UI)
    return f"{base.rstrip('/')}/#/experiments/{registration['experiment_id']}/runs/{registration['run_id']}"


# ----------------------------------------------------------------------------------------------
# Tasks
# ----------------------------------------------------------------------------------------------


@task(retries=2, retry_delay_seconds=5, task_run_name="prepare-workspace")
def prepare_workspace(root: str, name: str, workspace_parent: str | None = None) -> str:
    """Clone the project's last commit into a private workspace sharing the project's DVC cache."""
    log = get_run_logger()
    project = Path(root)
    parent = Path(workspace_parent) if workspace_parent else project.parent
    workspace = parent / f".{project.name}-exp-{name}"
    if workspace.exists():
        shutil.rmtree(workspace)
    if run_checked(["git", "status", "--porcelain", "--untracked-files=no"], project):
        log.warning("%s has uncommitted changes: the run uses the last commit only", project)
    run_checked(["git", "clone", "--quiet", str(project), str(workspace)], parent)
    cache = run_checked(dvc_cmd("cache", "dir"), project)
    run_checked(dvc_cmd("cache", "dir", "--local", cache), workspace)
    # committed outputs come from the shared cache; missing ones are simply rebuilt
    subprocess.run(dvc_cmd("checkout", "--quiet"), cwd=workspace, env=tool_env(), capture_output=True, check=False)
    log.info("workspace %s (commit %s, DVC cache %s)", workspace,
             run_checked(["git", "rev-parse", "--short", "HEAD"], workspace), cache)
    return str(workspace)


@task(task_run_name="set-params")
def set_params(workspace: str, overrides: list[str]) -> dict[str, Any]:
    """Apply ``-S`` overrides to the workspace's params.yaml exactly as ``dvc exp run -S`` does."""
    params_file = Path(workspace) / "params.yaml"
    if overrides:
        apply_param_overrides(params_file, overrides)
        get_run_logger().info("params overrides: %s", " ".join(overrides))
    return yaml.safe_load(params_file.read_text(encoding="utf-8"))


@task(task_run_name="stage-{stage}")
def run_stage(workspace: str, stage: str, env: dict[str, str]) -> None:
    """One DVC stage (a task per stage; see the module docstring)."""
    log = get_run_logger()
    log.info("stage %s: dvc reproduce --single-item", stage)
    started = time.monotonic()
    stream_stage(Path(workspace), stage, tool_env(**env), log)
    log.info("stage %s done in %.1f s", stage, time.monotonic() - started)


@task(retries=2, retry_delay_seconds=5, task_run_name="save-experiment")
def save_experiment(workspace: str, root: str, name: str) -> str:
    """``dvc exp save`` in the workspace, then push the experiment ref into the project."""
    ws = Path(workspace)
    # like `dvc exp run`, the experiment commit holds every output git does not ignore
    # (metrics, plots and reports declared with cache: false), so `dvc exp show` lists its metrics
    untracked = run_checked(["git", "ls-files", "--others", "--exclude-standard", "--directory"], ws).splitlines()
    include = [arg for path in untracked if path.strip() for arg in ("--include-untracked", path.strip())]
    run_checked(dvc_cmd("exp", "save", "--force", "--name", name, *include), ws)
    run_checked(dvc_cmd("exp", "push", "--force", "--no-cache", root, name), ws)
    rev = run_checked(["git", "rev-parse", f"refs/exps/{_exp_ref_path(ws, name)}"], Path(root))
    get_run_logger().info("DVC experiment '%s' (%s) saved in %s; reproduce with `dvc exp apply %s`",
                          name, rev[:7], root, name)
    return rev


def _exp_ref_path(workspace: Path, name: str) -> str:
    baseline = run_checked(["git", "rev-parse", "HEAD"], workspace)
    return f"{baseline[:2]}/{baseline[2:]}/{name}"


@task(retries=2, retry_delay_seconds=5, task_run_name="record-mlflow-run")
def record_mlflow_run(workspace: str, exp_name: str, exp_rev: str) -> dict[str, Any]:
    """Link the MLflow run on the Prefect run, and the DVC experiment and Prefect run on the MLflow run."""
    from xdistill.registry.store import client_for

    registration = json.loads((Path(workspace) / "metrics" / "register.json").read_text(encoding="utf-8"))
    url = mlflow_run_url(registration)
    client = client_for(registration["tracking_uri"])
    client.set_tag(registration["run_id"], "dvc_experiment_rev", exp_rev)
    if flow_run.get_id():
        client.set_tag(registration["run_id"], "prefect_flow_run_id", flow_run.get_id())
    create_link_artifact(key="mlflow-run", link=url, link_text=f"MLflow run {registration['run_id']}")
    create_markdown_artifact(key="distill-run", markdown=_run_markdown(registration, url, exp_name, exp_rev))
    get_run_logger().info("MLflow run %s (%s), model %s version %s",
                          registration["run_id"], url, registration["model_name"], registration["model_version"])
    return registration


def _run_markdown(registration: dict[str, Any], url: str, exp_name: str, exp_rev: str) -> str:
    return "\n".join([
        "# distill run",
        "",
        "| what | value |",
        "|---|---|",
        f"| MLflow run | [{registration['run_id']}]({url}) |",
        f"| tracking URI | `{registration['tracking_uri']}` |",
        f"| registered model | `{registration['model_uri']}` |",
        f"| DVC experiment | `{exp_name}` ({exp_rev[:7]}): `dvc exp apply {exp_name}` |",
    ])


@task(retries=2, retry_delay_seconds=5, task_run_name="promote-{model_name}-v{version}")
def promote_task(model_name: str, version: str, tracking_uri: str, promote_params: dict[str, Any]) -> dict[str, Any]:
    """The promotion gate (xdistill.registry.promotion.promote) for the run's new version."""
    from xdistill.registry.promotion import PromoteConfig, promote

    result = promote(model_name, version, tracking_uri=tracking_uri,
                     config=PromoteConfig.from_params(promote_params))
    get_run_logger().info("promotion of %s v%s: %s (%s)", model_name, version, result.decision,
                          "; ".join(result.reasons))
    return result.as_dict()


# ----------------------------------------------------------------------------------------------
# Flows
# ----------------------------------------------------------------------------------------------


@flow(name="distill", log_prints=True)
def distill(
    languages: list[str] | None = None,
    teacher: str | None = None,
    student: str | None = None,
    train_steps: int | None = None,
    mirror: str | None = None,
    overrides: dict[str, Any] | None = None,
    experiment: str | None = None,
    promote: bool = True,
    project: str | None = None,
    workspace_parent: str | None = None,
    gpu_deployment: str | None = None,
    keep_workspace: bool = False,
) -> dict[str, Any]:
    """Run the whole DVC pipeline as a DVC experiment with these parameters, register and promote.

    Args:
        languages / teacher / student / train_steps / mirror: shortcuts for the params
            ``languages``, ``models.teacher``, ``models.student``, ``train.steps``, ``corpora.mirror``.
        overrides: any other params as ``{"dotted.key": value}`` (``dvc exp run -S`` semantics),
            e.g. ``{"train.learning_rate": 5e-5, "train.loss.mse": 1.0}``.
        experiment: DVC experiment name (default: from the Prefect run's name).
        promote: run the promotion gate on the new model version.
        project: project checkout (default: ``XDISTILL_PROJECT_ROOT`` or the working directory).
        workspace_parent: where the private workspace goes (default: next to the project).
        gpu_deployment: run teacher_embed/train as runs of this deployment (e.g. ``stage/gpu``).
        keep_workspace: keep the private workspace afterwards (debugging).
    """
    log = get_run_logger()
    root = project_root(project)
    name = experiment_name(experiment)
    if name in existing_experiments(root):
        raise ValueError(f"DVC experiment '{name}' already exists in {root}: choose another name")
    overrides_list = param_overrides(languages, teacher, student, train_steps, mirror, overrides)
    workspace = prepare_workspace(str(root), name, workspace_parent)
    saved = False
    committed_registration = _registration(Path(workspace))  # from the project's last commit, if any
    try:
        params = set_params(workspace, overrides_list)
        env = stage_env(root, Path(workspace), name)
        for stage_name in pipeline_stages(Path(workspace)):
            if gpu_deployment and stage_name in GPU_STAGES:
                _run_stage_remotely(gpu_deployment, workspace, stage_name, env)
            else:
                retries = IO_STAGES.get(stage_name, 0)
                run_stage.with_options(retries=retries, retry_delay_seconds=5)(workspace, stage_name, env)
        rev = save_experiment(workspace, str(root), name)
        saved = True
        registration = record_mlflow_run(workspace, name, rev)
        result: dict[str, Any] = {"experiment": name, "experiment_rev": rev, "mlflow_run_id": registration["run_id"],
                                  "model_version": registration["model_version"], "mlflow_url": mlflow_run_url(registration)}
        if promote:
            result["promotion"] = promote_task(registration["model_name"], registration["model_version"],
                                               registration["tracking_uri"], params.get("promote") or {})
        log.info("distill run done: %s", json.dumps(result))
        return result
    except BaseException:
        if not saved:
            _unregister_unsaved(Path(workspace), committed_registration)
        raise
    finally:
        if not keep_workspace:
            shutil.rmtree(workspace, ignore_errors=True)


def stage_env(root: Path, workspace: Path, name: str) -> dict[str, str]:
    """What the stages get: ``dvc exp run``'s variables, the project's store, the experiment's code."""
    return {
        "DVC_EXP_NAME": name,
        "DVC_EXP_BASELINE_REV": run_checked(["git", "rev-parse", "HEAD"], workspace),
        REGISTRY_ROOT_ENV: str(root),
        # the stages run the experiment's own code, not whatever the installed checkout holds
        "PYTHONPATH": os.pathsep.join(filter(None, [str(workspace / "src"), os.environ.get("PYTHONPATH")])),
    }


def _registration(workspace: Path) -> dict[str, Any] | None:
    register_file = workspace / "metrics" / "register.json"
    return json.loads(register_file.read_text(encoding="utf-8")) if register_file.is_file() else None


def _unregister_unsaved(workspace: Path, committed: dict[str, Any] | None) -> None:
    """The register stage ran in this run but the experiment was never saved: take the version back out."""
    registration = _registration(workspace)
    if registration is None or registration == committed:
        return  # nothing registered by this run (a committed register.json is another run's)
    from xdistill.registry.register import unregister

    unregister(registration)
    get_run_logger().warning("run failed after registration: removed %s version %s",
                             registration["model_name"], registration["model_version"])


def _run_stage_remotely(deployment: str, workspace: str, stage: str, env: dict[str, str]) -> None:
    """Run one stage as a flow run of ``deployment`` (the gpu pool) and wait for it."""
    from prefect.deployments import run_deployment

    run = run_deployment(deployment, parameters={"workspace": workspace, "stage_name": stage, "env": env},
                         timeout=None)
    if run.state is None or not run.state.is_completed():
        raise StageFailed(f"stage '{stage}' failed on {deployment}: {run.state.message if run.state else 'no state'}")


@flow(name="stage")
def stage(workspace: str, stage_name: str, env: dict[str, str] | None = None) -> None:
    """Run one DVC stage in an existing workspace (the unit the gpu pool executes)."""
    run_stage(workspace, stage_name, env or {})


@flow(name="sweep")
def sweep(
    param_sets: list[dict[str, Any]],
    deployment: str | None = None,
    max_parallel: int = 1,
    promote: bool = True,
    project: str | None = None,
) -> list[dict[str, Any]]:
    """Run ``distill`` once per parameter set (each a dict of ``distill`` parameters).

    Every member gets its own private workspace, so members never share a DVC workspace. With
    ``deployment`` (e.g. ``distill/cpu``) members are separate flow runs that any worker of that
    pool picks up, ``max_parallel`` at a time; without it they run here one after another.
    """
    log = get_run_logger()
    members = [{"promote": promote, "project": project, **member} for member in param_sets]
    if deployment:
        with ThreadPoolExecutor(max_workers=max(1, max_parallel)) as pool:
            results = list(pool.map(lambda member: _run_member(deployment, member), members))
    else:
        results = [_member_result(distill(**member, return_state=True), "subflow") for member in members]
    create_markdown_artifact(key="sweep", markdown=_sweep_markdown(param_sets, results))
    log.info("sweep of %d parameter sets done", len(results))
    return results


def _run_member(deployment: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """One sweep member as a flow run of ``deployment``; waits for it."""
    from prefect.deployments import run_deployment

    run = run_deployment(deployment, parameters=parameters, timeout=None)
    return _member_result(run.state, str(run.id))


def _member_result(state: Any, flow_run_id: str) -> dict[str, Any]:
    """A member's result, or why it failed (a failed member does not stop the sweep)."""
    if state is None or not state.is_completed():
        return {"failed": state.message if state else "no state", "flow_run": flow_run_id}
    try:
        return state.result()
    except Exception:  # the result was not persisted where this process can read it
        return {"flow_run": flow_run_id, "state": state.name}


def _sweep_markdown(param_sets: list[dict[str, Any]], results: list[dict[str, Any]]) -> str:
    rows = ["| params | experiment | model version | promotion |", "|---|---|---|---|"]
    for member, result in zip(param_sets, results, strict=True):
        decision = (result.get("promotion") or {}).get("decision", result.get("failed", "-"))
        rows.append(f"| `{json.dumps(member)}` | {result.get('experiment', '-')} | "
                    f"{result.get('model_version', '-')} | {decision} |")
    return "# sweep\n\n" + "\n".join(rows)
