"""The Prefect and MLflow UIs as a person uses them, in headless Chromium.

A person starts the stack (scripts/prefect_up.sh, scripts/mlflow_ui.sh: flows/local_stack.py, here on
free ports of 127.0.0.1 over a throw-away copy of the pipeline, testbed/pipeline_project.py), then:

- Prefect UI: Deployments -> distill/cpu -> Run -> Custom run; the form shows every parameter with
  its description and the valid choices; they fill in a tiny run (two languages, a few train
  steps, the small student, one loss weight) and submit; the flow-run page shows the stages as task
  runs and the training's log while the run goes on, then Completed, the pipeline progress, the
  link to the MLflow run and the run summary;
- MLflow UI (through that link): the run's metrics and its plots among the artifacts, and the new
  version of xdistill-student with the champion alias, or the promotion gate's refusal and reasons;
- `dvc exp show` in the project lists the run's DVC experiment;
- a run with a mirror folder that does not exist fails, and its flow-run page says which stage
  failed and why.

Each step saves a screenshot (numbered, in XDISTILL_UI_SCREENSHOTS or the test's temp folder);
README.md shows the key ones (docs/ui/). Everything the tests start is stopped at the end, and no
server, worker, flow-run or browser process of theirs may remain.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from ui_browser import (
    VIEWPORT,
    Screens,
    appears,
    browser_context,
    choose,
    fill,
    form_field,
    mlflow_model_training_view,
    newest_logs_first,
    open_artifacts,
    open_custom_run,
    open_deployment,
    open_tab,
    shown,
    submit_and_open_run,
    wait_for_final_state,
)

from flows.local_stack import LocalStack, MlflowUi, free_port
from flows.registry_tasks import MLFLOW_UI_ENV
from testbed.pipeline_project import make_pipeline_project, pipeline_stages, run
from xdistill.registry.promotion import DECISION_TAG, REASONS_TAG
from xdistill.registry.store import client_for

pytestmark = [pytest.mark.slow, pytest.mark.browser]

# The project's own params: one language, the tiny pipeline, two benchmarks on a few pairs. The form
# then changes what a person would: a second language, the student, the steps, one loss weight.
PROJECT_PARAMS: dict[str, Any] = {
    "languages": ["de"],
    "parallel": {"max_train_pairs": 200, "dev_pairs_per_language": 50},
    "train": {"batch_size": 8, "eval_every": 2, "checkpoint_every": 2, "dev_max_pairs": 50},
    "evaluate": {
        "benchmarks": ["sts17", "tatoeba"],
        "sts17_max_pairs": 50,
        "tatoeba_max_pairs": 100,
        "dev_max_pairs": 50,
        "muse": False,
        "mining_flores": False,
    },
}
EXPERIMENT = "ui-browser-run"
STAGES = [stage for stage in pipeline_stages() if stage != "promote"]  # the flow holds the gate itself
# a tiny run takes minutes on a quiet machine; 40 min were measured on the 2 loaded cores (nice 19)
RUN_TIMEOUT_S = 3600
MODEL_NAME = "xdistill-student"


@dataclass
class Ui:
    project: Path
    prefect: LocalStack
    mlflow: MlflowUi
    context: Any  # playwright BrowserContext
    screens: Screens


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory, mirror_dir: Path) -> Iterator[Ui]:
    base = tmp_path_factory.mktemp("ui")
    started_at = time.time()
    project = make_pipeline_project(base / "project", mirror_dir, overrides=PROJECT_PARAMS)
    screens = Screens(Path(os.environ.get("XDISTILL_UI_SCREENSHOTS") or base / "screenshots"))
    prefect = LocalStack(home=base / "prefect_home", port=free_port(), log_dir=base / "logs")
    mlflow = MlflowUi(project, free_port(), log_dir=base / "logs")
    try:
        prefect.start_server()
        prefect.create_pools()
        prefect.deploy(project)
        prefect.start_worker("cpu", extra_env={MLFLOW_UI_ENV: mlflow.url})
        mlflow.start()
        with browser_context(base / "chromium-profile") as context:
            yield Ui(project, prefect, mlflow, context, screens)
    finally:
        prefect.stop()
        mlflow.stop()
    leftovers = _leftover_processes(base, started_at)
    assert not leftovers, "processes of the UI tests still run:\n" + "\n".join(leftovers)


def _leftover_processes(base: Path, started_at: float) -> list[str]:
    """Processes this module started that still run: this process's new descendants, and anything
    (reparented or not) that carries the test's Prefect home or temp folder."""
    mine = {proc.pid for proc in psutil.Process().children(recursive=True)}
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "environ", "create_time", "status"]):
        info = proc.info
        if proc.pid == os.getpid() or info["status"] == psutil.STATUS_ZOMBIE:
            continue
        cmdline = " ".join(info["cmdline"] or [])
        environ = info["environ"] or {}
        ours = (
            (proc.pid in mine and (info["create_time"] or 0) >= started_at)
            or str(base) in cmdline
            or str(base) in environ.get("PREFECT_HOME", "")
        )
        if ours:
            found.append(f"{proc.pid}: {cmdline[:160]}")
    return found


def _exp_refs(project: Path) -> dict[str, str]:
    out = run(["git", "for-each-ref", "--format=%(refname) %(objectname)", "refs/exps"], project).stdout
    return {line.split()[0].rsplit("/", 1)[-1]: line.split()[1] for line in out.splitlines() if line.strip()}


def _project_state(project: Path) -> tuple[str, str, list[str]]:
    """git status, params.yaml and the sibling workspaces: what a run must not leave changed."""
    status = run(["git", "status", "--porcelain"], project).stdout
    leftovers = sorted(p.name for p in project.parent.glob(f".{project.name}-exp-*"))
    return status, (project / "params.yaml").read_text(encoding="utf-8"), leftovers


def _registry(ui: Ui) -> Any:
    return client_for(ui.mlflow.store())


def _versions(ui: Ui) -> list[str]:
    if not Path(ui.mlflow.store().removeprefix("sqlite:///")).exists():
        return []
    return sorted(str(v.version) for v in _registry(ui).search_model_versions(f"name = '{MODEL_NAME}'"))


@pytest.mark.timeout(RUN_TIMEOUT_S + 900)
def test_a_custom_run_in_the_prefect_ui_becomes_a_model_version_in_the_mlflow_ui(ui: Ui) -> None:
    shot, page = ui.screens.shot, ui.context.new_page()
    before = _project_state(ui.project)

    # --- Prefect: find the deployment, fill the Custom run form ---------------------------------
    page.goto(f"{ui.prefect.ui_url}/deployments")
    shown(page, "distill").wait_for()
    shot(page, "prefect-deployments")
    open_deployment(page, ui.prefect.ui_url, "distill", "cpu")
    shot(page, "prefect-deployment-distill-cpu")
    run_name = open_custom_run(page)
    for title, says in [
        ("languages", "English is always the source"),
        ("teacher", "English teacher model"),
        ("student", "multilingual model that is trained"),
        ("train_steps", "Optimiser steps"),
        ("loss_weights", "Weights of the distillation losses"),
        ("mirror", "offline corpora mirror"),
        ("Additive margin softmax", "in-batch negatives"),
    ]:
        assert says in form_field(page, title).first.inner_text(), f"the form's {title} field lacks its description"
    assert page.get_by_text("Property is type").count() == 0  # no nullable field that only reads "None"
    shot(page, "prefect-custom-run-form", whole=True)
    choose(page, "languages", ["de", "es"])
    choose(page, "student", ["pypi:all-minilm-l6-v2"])
    fill(page, "train_steps", "4")
    fill(page, "Additive margin softmax", "0.1")
    fill(page, "experiment", EXPERIMENT)
    shot(page, "prefect-custom-run-filled", whole=True)
    flow_run_id = submit_and_open_run(page, run_name)

    # --- Prefect: follow the run ------------------------------------------------------------------
    seen_while_running: list[str] = []

    def watch(page: Any) -> None:
        if seen_while_running:
            return
        newest_logs_first(page)
        # the training's progress: its step lines and its validations, from step 0 on (four step lines alone
        # were out of the Logs tab's view, under the next stages' lines, seconds after they came: a look
        # every ~10 s missed them once in a full CI run)
        train_lines = page.get_by_text(re.compile(r"^\[train\] .*(step \d+/\d+|dev @ step \d+)")).filter(visible=True)
        if appears(train_lines, 5000):
            train_lines.first.scroll_into_view_if_needed()
            seen_while_running.append(shot(page, "prefect-flow-run-training").name)

    state = wait_for_final_state(page, RUN_TIMEOUT_S, while_running=watch)
    shot(page, "prefect-flow-run-completed")
    assert state == "Completed", f"flow run {flow_run_id} ended {state}"
    assert seen_while_running, "the training's log never showed on the flow-run page while the run went on"

    open_tab(page, "Task Runs")
    for stage in STAGES:
        shown(page, f"stage-{stage}", exact=True).wait_for()
    shot(page, "prefect-task-runs")
    open_artifacts(page)
    for artifact in ("pipeline-progress", "mlflow-run", "distill-run", "promotion"):
        shown(page, artifact, exact=True).wait_for()
    shot(page, "prefect-artifacts")
    page.set_viewport_size(VIEWPORT)

    # --- the DVC experiment, in the project; the project itself untouched ---------------------------
    assert _project_state(ui.project) == before
    exp_show = run([sys.executable, "-m", "dvc", "exp", "show", "--no-pager", "--csv"], ui.project).stdout
    assert EXPERIMENT in exp_show, exp_show
    ref = _exp_refs(ui.project)[EXPERIMENT]
    exp_params = yaml.safe_load(run(["git", "show", f"{ref}:params.yaml"], ui.project).stdout)
    assert exp_params["languages"] == ["de", "es"] and exp_params["train"]["steps"] == 4
    assert exp_params["models"]["student"] == "pypi:all-minilm-l6-v2"
    assert exp_params["train"]["loss"]["additive_margin_softmax"] == 0.1
    assert exp_params["evaluate"]["benchmarks"] == ["sts17", "tatoeba"]  # the project's own, kept

    # --- MLflow: the run through the Prefect link, its metrics and plots, the model version -------
    client = _registry(ui)
    mlflow_run = client.search_runs(
        [client.get_experiment_by_name("xdistill").experiment_id], f"tags.dvc_experiment = '{EXPERIMENT}'"
    )[0]
    assert mlflow_run.data.tags["prefect_flow_run_id"] == flow_run_id
    assert mlflow_run.data.tags["dvc_experiment_rev"] == ref
    summary = json.loads(run(["git", "show", f"{ref}:metrics/eval/summary.json"], ui.project).stdout)
    assert mlflow_run.data.metrics["eval.summary.primary_score"] == pytest.approx(summary["primary_score"])

    mlflow_model_training_view(page, ui.mlflow.url)
    page = follow_link_to_mlflow(page, ui, flow_run_id, mlflow_run.info.run_id)
    shown(page, "About this run").wait_for()
    page.get_by_placeholder("Search metrics").fill("primary_score")
    shown(page, "eval.summary.primary_score").wait_for()
    shot(page, "mlflow-run-metrics")
    open_tab(page, "Artifacts")
    shown(page, "plots", exact=True).click()
    shown(page, "train_curves.png").click()
    page.locator("img[src*='train_curves.png'], img").first.wait_for()
    shot(page, "mlflow-run-artifacts-plot")

    version = json.loads(run(["git", "show", f"{ref}:metrics/register.json"], ui.project).stdout)["model_version"]
    page.goto(f"{ui.mlflow.url}/#/models/{MODEL_NAME}/versions/{version}")
    shown(page, f"Version {version}").wait_for()
    # the gate judged the version against the untrained student: crowned exactly when it is not below it
    tags = client.get_model_version(MODEL_NAME, str(version)).tags
    decision, reasons = tags.get(DECISION_TAG), tags.get(REASONS_TAG, "")
    base = summary["models"]["student-untrained"]["primary_score"]
    assert (decision == "promoted") == (summary["primary_score"] >= base and "regressed" not in reasons), tags
    assert "untrained student" in reasons
    champion = client.get_registered_model(MODEL_NAME).aliases.get("champion")
    assert (str(champion) == str(version)) == (decision == "promoted")
    if decision == "promoted":
        shown(page, "champion").wait_for()
    else:  # the gate refused it: the page shows the decision and the reasons as version tags
        shown(page, REASONS_TAG).wait_for()
        shown(page, "refused", exact=True).wait_for()
    shown(page, DECISION_TAG).scroll_into_view_if_needed()
    shot(page, "mlflow-model-version")
    page.close()


def follow_link_to_mlflow(page: Any, ui: Ui, flow_run_id: str, mlflow_run_id: str) -> Any:
    """Flow run -> Artifacts -> distill-run -> the MLflow run link (it opens a new tab, returned)."""
    page.goto(f"{ui.prefect.ui_url}/runs/flow-run/{flow_run_id}")
    open_artifacts(page)
    shown(page, "distill-run", exact=True).click()
    page.set_viewport_size(VIEWPORT)
    shown(page, "distill run", exact=True).wait_for()
    ui.screens.shot(page, "prefect-distill-run-artifact")
    link = page.get_by_role("link", name=mlflow_run_id).first
    assert (link.get_attribute("href") or "").startswith(ui.mlflow.url), link.get_attribute("href")
    with page.context.expect_page() as new_tab:
        link.click()
    mlflow_page = new_tab.value
    page.close()
    return mlflow_page


@pytest.mark.timeout(1200)
def test_a_failing_stage_says_which_and_why_on_the_flow_run_page(ui: Ui, tmp_path: Path) -> None:
    shot, page = ui.screens.shot, ui.context.new_page()
    before, refs_before, versions_before = _project_state(ui.project), _exp_refs(ui.project), _versions(ui)
    missing = tmp_path / "no-such-mirror"

    open_deployment(page, ui.prefect.ui_url, "distill", "cpu")
    run_name = open_custom_run(page)
    choose(page, "languages", ["de"])
    fill(page, "mirror", str(missing))
    fill(page, "experiment", "ui-browser-broken")
    flow_run_id = submit_and_open_run(page, run_name)
    state = wait_for_final_state(page, 900)
    assert state == "Failed", f"flow run {flow_run_id} ended {state}"

    # the folder's name, not its whole path: the page renders the message as markdown (the
    # underscores of pytest's temp folder name become emphasis, quotes may turn typographic)
    error = re.compile(r"stage .corpora. failed: error: .*" + re.escape(missing.name) + ".*mirror folder not found")
    shot(page, "prefect-flow-run-failed")
    open_tab(page, "Details")
    shown(page, "State Message", exact=True).scroll_into_view_if_needed()
    shown(page, "See More", exact=True).click()  # the message is cut after its first line
    shown(page, error).wait_for()
    shot(page, "prefect-flow-run-failed-state-message")
    open_tab(page, "Logs")
    newest_logs_first(page)
    shown(page, error).wait_for()  # the ERROR line of the stage-corpora task
    open_artifacts(page)
    shown(page, "distill-failure", exact=True).click()
    page.set_viewport_size(VIEWPORT)
    shown(page, "distill failed", exact=True).wait_for()
    shown(page, error).wait_for()
    shown(page, re.compile("the project and its params.yaml are unchanged")).wait_for()
    shot(page, "prefect-flow-run-failure-artifact")

    assert _project_state(ui.project) == before
    assert _exp_refs(ui.project) == refs_before
    assert _versions(ui) == versions_before
    page.close()
