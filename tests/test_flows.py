"""Prefect flow tests: the parameters the UI form shows, the workspace, following `dvc exp run`, the sweep.

params.yaml writing is tests/test_params_file.py.

The whole path through the UIs (a Custom run in the Prefect UI, the model version in the MLflow UI)
is tests/test_ui_browser.py; the sweep below runs the distill flow twice on a two-stage project.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest
import yaml

from flows import distill as distill_flows
from flows import dvc_process, registry_tasks, retries, run_form
from flows import sweep as sweep_flows
from flows import workspace as run_workspace
from testbed.pipeline_project import REPO_ROOT, init_git_dvc, run
from xdistill.registry.store import PromotionLockBusy, client_for, resolve_tracking_uri

FLOWS_DIR = REPO_ROOT / "flows"


# --- the parameters as the Custom run form shows them ------------------------------------------


def test_every_distill_parameter_renders_with_a_description_and_no_null_type() -> None:
    """The form shows "Property is type None" for a nullable parameter: none may be nullable."""
    from prefect.utilities.callables import parameter_schema

    schema = parameter_schema(distill_flows.distill).model_dump()
    properties = schema["properties"]
    assert list(properties)[:6] == ["languages", "teacher", "student", "train_steps", "loss_weights", "mirror"]
    for name, prop in properties.items():
        assert prop.get("description"), f"{name} has no description"
        nullable = any(option.get("type") == "null" for option in prop.get("anyOf", []))
        assert not nullable and prop.get("default", "unset") is not None, f"{name} renders as nullable"
    assert schema["required"] == []
    assert set(properties["languages"]["items"]["enum"]) >= {"ar", "de", "es", "fr", "it", "nl", "ru", "tr", "zh"}
    assert "en" not in properties["languages"]["items"]["enum"]
    assert properties["teacher"]["enum"] == [
        "pypi:all-minilm-l6-v2",
        "pypi:all-mpnet-base-v2",
        "pypi:multilingual-e5-small",
    ]
    assert properties["train_steps"] == {**properties["train_steps"], "type": "integer", "exclusiveMinimum": 0}
    assert properties["profile"]["enum"] == ["gpu", "gpu-fp16", "multi-host"]  # profiles/*.yaml
    assert properties["train_processes"]["anyOf"] == [
        {"const": "auto", "type": "string"},
        {"minimum": 1, "type": "integer"},
    ]
    weights = schema["definitions"]["LossWeights"]["properties"]
    assert all(prop["type"] == "number" and prop["minimum"] == 0 and prop["description"] for prop in weights.values())


def test_loss_weight_fields_are_the_trainers_losses() -> None:
    from xdistill.training.losses import LOSS_NAMES

    assert tuple(run_form.LossWeights.model_fields) == LOSS_NAMES


def test_filled_fields_become_params_values_and_empty_ones_keep_params_yaml() -> None:
    run_params = run_form.run_params
    assert run_params() == {}
    assert run_params(languages=[], mirror="", loss_weights={}, train_processes="") == {}  # empty form fields
    assert run_params(train_processes="auto") == {"runtime.nproc": "auto"}
    assert run_params(train_processes=2, overrides={"runtime.nproc": 4}) == {"runtime.nproc": 4}
    assert run_params(
        languages=["de", "es"],
        teacher="pypi:all-mpnet-base-v2",
        train_steps=5,
        loss_weights={"additive_margin_softmax": 0.1},
        mirror="/data/mirror",
        overrides={"train.learning_rate": 1e-05, "train.steps": 7},
    ) == {
        "languages": ["de", "es"],
        "models.teacher": "pypi:all-mpnet-base-v2",
        "train.steps": 7,
        "corpora.mirror": "/data/mirror",
        "train.loss.additive_margin_softmax": 0.1,
        "train.learning_rate": 1e-05,
    }


def test_a_runs_profile_goes_into_its_workspace_params_first_and_its_fields_win(tmp_path: Path) -> None:
    """What set-params does in a run's workspace (a clone: params.yaml and profiles/ as committed)."""
    from prefect.logging import disable_run_logger

    shutil.copy(REPO_ROOT / "params.yaml", tmp_path / "params.yaml")
    shutil.copytree(REPO_ROOT / "profiles", tmp_path / "profiles")
    values = run_form.run_params(train_steps=7, train_processes=2)
    with disable_run_logger():
        params = run_workspace.set_params.fn(str(tmp_path), values, "gpu")
    assert params == yaml.safe_load((tmp_path / "params.yaml").read_text(encoding="utf-8"))
    assert params["train"]["device"] == "cuda" and params["train"]["precision"] == "bf16"
    assert params["train"]["steps"] == 7 and params["runtime"]["nproc"] == 2  # the field wins over the profile
    assert params["runtime"]["pin_memory"] is True


def test_a_relative_mirror_is_re_pointed_from_the_workspace(tmp_path: Path) -> None:
    # the corpora stage resolves a relative mirror against the workspace's params.yaml folder
    root, beside, elsewhere = tmp_path / "proj", tmp_path / ".proj-exp-a", tmp_path / "runs" / ".proj-exp-b"
    for workspace in (beside, elsewhere):
        workspace.mkdir(parents=True)
        (workspace / "params.yaml").write_text("corpora:\n  mirror: ../shared/corpora\n", encoding="utf-8")
    rebase = run_form.mirror_from_workspace
    assert rebase({}, root, beside) == {}  # beside the project: the committed value still resolves
    assert rebase({}, root, elsewhere) == {"corpora.mirror": "../../shared/corpora"}
    assert rebase({"corpora.mirror": "mirror"}, root, beside) == {"corpora.mirror": "../proj/mirror"}
    assert rebase({"corpora.mirror": "/data/mirror"}, root, elsewhere) == {"corpora.mirror": "/data/mirror"}
    assert (elsewhere / "../../shared/corpora").resolve() == (root / "../shared/corpora").resolve()


# --- following `dvc exp run` ---------------------------------------------------------------------


def test_stage_output_is_split_into_lines_and_errors_are_found() -> None:
    stream = io.BytesIO(b"start\nstep 1/3\rstep 2/3\rstep 3/3\nerror: data/raw: mirror not found\ntail")
    assert list(dvc_process._split_output(stream)) == [
        ("start", False),
        ("step 1/3", True),
        ("step 2/3", True),
        ("step 3/3", False),
        ("error: data/raw: mirror not found", False),
        ("tail", False),
    ]
    assert dvc_process.stage_error(["a", "error: x", "b", "error: x"]) == "error: x"
    assert dvc_process.stage_error([f"line {i}" for i in range(30)]).startswith("line 15 |")


def test_dvc_exp_run_output_is_read_stage_by_stage(tmp_path: Path) -> None:
    """A real `dvc exp run` of three stages: one runs, one is skipped on the second run, one fails."""
    project = tmp_path / "p"
    project.mkdir()
    (project / "params.yaml").write_text("a: {n: 1}\n", encoding="utf-8")
    (project / "dvc.yaml").write_text(
        yaml.safe_dump(
            {
                "stages": {
                    "first": {"cmd": "echo first-out && echo 1 > one.txt", "params": ["a"], "outs": ["one.txt"]},
                    "second": {
                        "cmd": "cat one.txt > two.txt && echo step 1/2 && echo step 2/2",
                        "deps": ["one.txt"],
                        "outs": ["two.txt"],
                    },
                    "third": {"cmd": "echo error: it broke >&2; exit 2", "deps": ["two.txt"], "outs": ["three.txt"]},
                }
            }
        ),
        encoding="utf-8",
    )
    init_git_dvc(project)
    run(["git", "add", "-A"], project)
    run(["git", "commit", "-qm", "three stages"], project)

    def sections(name: str) -> tuple[dict[str, list[str]], list[str], int]:
        dvc_run = dvc_process.DvcRun(["exp", "run", "--name", name], project, dvc_process.tool_env())
        try:
            preamble = [line for line, _ in dvc_run.section()]
            found = {}
            while dvc_run.next_stage is not None:
                stage, header = dvc_run.next_stage, dvc_run.header
                found[stage] = [header, *(line for line, _ in dvc_run.section())]
            return found, preamble, dvc_run.wait()
        finally:
            dvc_run.stop()

    found, preamble, returncode = sections("e1")
    assert list(found) == ["first", "second", "third"] and returncode != 0
    assert found["first"][0] == "Running stage 'first':" and "first-out" in found["first"]
    assert "step 2/2" in found["second"] and "error: it broke" in found["third"]
    assert dvc_process.stage_error(found["third"]) == "error: it broke"
    assert any("Reproducing experiment 'e1'" in line for line in preamble)

    found, _, returncode = sections("e2")  # nothing changed: DVC skips what ran, the broken stage runs again
    assert list(found) == ["first", "second", "third"] and returncode != 0
    assert [found[stage][0].startswith("Stage ") for stage in found] == [True, True, False], found


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_stopping_dvc_lets_the_running_stage_clean_up_after_itself(tmp_path: Path) -> None:
    """A cancelled run stops `dvc exp run` with SIGINT first: the stage gets KeyboardInterrupt and runs its own
    cleanup (the register stage takes back a version it registered), which a plain SIGTERM would skip."""
    project = tmp_path / "p"
    project.mkdir()
    init_git_dvc(project)
    (project / "stage.py").write_text(
        "import pathlib, time\npathlib.Path('started').write_text('1')\n"
        "try:\n    time.sleep(600)\nexcept KeyboardInterrupt:\n    pathlib.Path('cleaned-up').write_text('1')\n"
        "    raise\n",
        encoding="utf-8",
    )
    (project / "dvc.yaml").write_text(
        yaml.safe_dump({"stages": {"wait": {"cmd": f"{sys.executable} stage.py", "deps": ["stage.py"]}}}),
        encoding="utf-8",
    )
    for cmd in (["git", "add", "-A"], ["git", "commit", "-qm", "one stage"]):
        run(cmd, project)
    dvc_run = dvc_process.DvcRun(["exp", "run", "--name", "stopped"], project, dvc_process.tool_env())
    deadline = time.monotonic() + 120
    while not (project / "started").exists() and time.monotonic() < deadline and dvc_run.proc.poll() is None:
        time.sleep(0.2)
    assert (project / "started").exists()
    dvc_run.stop()
    assert dvc_run.proc.poll() is not None
    assert (project / "cleaned-up").exists()


def test_outputs_a_lock_names_but_this_cache_lacks_come_from_the_run_cache(tmp_path: Path) -> None:
    """A dvc.lock committed from another machine names outputs this DVC cache lacks: DVC reruns such a
    stage even when its run cache holds the same deps and params; without the entry it restores it."""
    runs = tmp_path / "runs.log"
    project = tmp_path / "p"
    project.mkdir()
    (project / "in.txt").write_text("same input\n", encoding="utf-8")
    (project / "dvc.yaml").write_text(
        yaml.safe_dump(
            {
                "stages": {
                    "make": {
                        # a different output on every run, like the baselines' timings: only a restore reproduces it
                        "cmd": f"echo ran >> {runs} && python -c 'import uuid; print(uuid.uuid4())' > out.txt",
                        "deps": ["in.txt"],
                        "outs": ["out.txt"],
                    }
                }
            }
        ),
        encoding="utf-8",
    )
    init_git_dvc(project)
    run(["dvc", "repro", "-q"], project)
    built_here = (project / "out.txt").read_text()
    lock = yaml.safe_load((project / "dvc.lock").read_text())
    lock["stages"]["make"]["outs"][0]["md5"] = "0" * 32  # what another machine's run wrote
    (project / "dvc.lock").write_text(yaml.safe_dump(lock), encoding="utf-8")
    (project / "out.txt").unlink()
    run(["git", "add", "-A"], project)
    run(["git", "commit", "-qm", "lock from elsewhere"], project)
    as_dvc_does = shutil.copytree(project, tmp_path / "control", symlinks=True)  # the run cache travels along

    run(["dvc", "repro", "-q"], as_dvc_does)
    assert runs.read_text().count("ran") == 2  # DVC alone recomputes it

    assert run_workspace.forget_unrestorable_lock_entries(project) == ["make"]
    assert run_workspace.forget_unrestorable_lock_entries(project) == []  # nothing left to forget
    run(["dvc", "repro", "-q"], project)
    assert runs.read_text().count("ran") == 2  # restored, not run
    assert (project / "out.txt").read_text() == built_here


def test_resume_from_copies_an_interrupted_runs_checkpoints_into_the_workspace(tmp_path: Path) -> None:
    killed, fresh = tmp_path / ".p-exp-a-20261127-0502", tmp_path / ".p-exp-a-20261127-0750"
    (killed / "data" / "checkpoints").mkdir(parents=True)
    for name in ("last.pt", "best.pt", "start.pt"):
        (killed / "data" / "checkpoints" / name).write_bytes(name.encode())
    fresh.mkdir()
    assert run_workspace.copy_checkpoints(killed, fresh) == ["best.pt", "last.pt", "start.pt"]
    assert (fresh / "data" / "checkpoints" / "last.pt").read_bytes() == b"last.pt"
    with pytest.raises(ValueError, match=r"resume_from: .*data/checkpoints holds no training checkpoint"):
        run_workspace.copy_checkpoints(fresh / "elsewhere", tmp_path / "other")


def test_a_left_over_workspace_is_never_deleted(tmp_path: Path) -> None:
    """A killed run leaves its workspace (and checkpoints) behind; a new run of the same name must not
    wipe it, least of all one asked to resume from it."""
    killed = tmp_path / ".p-exp-a" / "data" / "checkpoints"
    killed.mkdir(parents=True)
    (killed / "last.pt").write_bytes(b"hours of training")
    with pytest.raises(ValueError, match=r"\.p-exp-a exists .*resume_from="):
        run_workspace.prepare_workspace.fn(str(tmp_path / "p"), "a", str(tmp_path))
    assert (killed / "last.pt").read_bytes() == b"hours of training"


def test_refusals_are_not_retried_but_tool_failures_are() -> None:
    from prefect.states import Failed

    from xdistill.errors import InputFileError

    for refusal in (ValueError("workspace exists"), InputFileError("params.yaml", "bad")):
        assert not retries.retry_unless_refused(None, None, Failed(data=refusal))
    assert retries.retry_unless_refused(None, None, Failed(data=RuntimeError("git: index.lock exists")))
    busy = PromotionLockBusy("another promotion held the lock for 600 s")
    assert retries.retry_unless_refused(None, None, Failed(data=busy))
    for task in (
        run_workspace.prepare_workspace,
        run_workspace.push_experiment,
        registry_tasks.record_mlflow_run,
        registry_tasks.promote_task,
    ):
        assert task.retries == 2 and task.retry_condition_fn is retries.retry_unless_refused


def test_an_experiment_is_never_pushed_over_another_of_its_name(tmp_path: Path) -> None:
    """No `dvc exp push --force`: a concurrent run's experiment of the same name stays; a retry after a push
    that went through finds its own ref and pushes nothing."""
    root, workspace = tmp_path / "p", tmp_path / "ws"
    root.mkdir()
    run(["git", "init", "-q"], root)
    (root / "a.txt").write_text("a", encoding="utf-8")
    run(["git", "add", "a.txt"], root)
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a"], root)
    run(["git", "clone", "-q", str(root), str(workspace)], tmp_path)
    baseline = run(["git", "rev-parse", "HEAD"], workspace).stdout.strip()
    ref = f"refs/exps/{baseline[:2]}/{baseline[2:]}/exp-a"
    run(["git", "update-ref", ref, baseline], workspace)  # what `dvc exp run` leaves in the workspace
    run(["git", "update-ref", ref, baseline], root)  # pushed already (the first attempt went through)
    from prefect.logging import disable_run_logger

    with disable_run_logger():
        assert run_workspace.push_experiment.fn(str(workspace), str(root), "exp-a") == baseline
    (root / "a.txt").write_text("b", encoding="utf-8")
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "b"], root)
    other = run(["git", "rev-parse", "HEAD"], root).stdout.strip()
    run(["git", "update-ref", ref, other], root)  # another run's experiment of that name
    with pytest.raises(ValueError, match="'exp-a' appeared in .* not overwritten"):
        run_workspace.push_experiment.fn(str(workspace), str(root), "exp-a")
    assert run(["git", "rev-parse", ref], root).stdout.strip() == other
    assert run_workspace.existing_experiments(root) == {"exp-a"}


def test_a_sweep_with_an_unknown_parameter_is_refused_before_any_member_runs() -> None:
    sweep_flows.check_members([{"train_steps": 100}, {"experiment": "b", "languages": ["de"]}])
    with pytest.raises(ValueError, match=r"member 2: unknown distill parameter\(s\) train_step; choose from"):
        sweep_flows.check_members([{"train_steps": 100}, {"train_step": 200}])


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_sweep_over_a_deployment_checks_it_and_keeps_a_refused_member_as_that_members_failure(tmp_path: Path) -> None:
    """The server refuses a member whose value breaks the deployment's schema (HTTP 409): that member
    fails, the sweep goes on and reports it; a deployment that does not exist stops it before any member."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        distill_flows.distill.to_deployment(name="schema").apply()
        with pytest.raises(ValueError, match="deployment 'distill/absent' not found"):
            sweep_flows.sweep(param_sets=[{"train_steps": 1}], deployment="distill/absent", project=str(tmp_path))
        results = sweep_flows.sweep(
            param_sets=[{"train_steps": 0}, {"train_steps": "many"}], deployment="distill/schema", project=str(tmp_path)
        )
    assert [result["flow_run"] for result in results] == [None, None]  # no flow run was created for either
    for result in results:
        assert result["failed"].startswith("refused by the server: ")
        assert "409" in result["failed"]


# --- the sweep: the distill flow run twice on a two-stage project -------------------------------


def test_stopping_a_worker_stops_its_flow_runs_in_their_own_sessions(tmp_path: Path) -> None:
    """A process worker starts each flow run in a session of its own (and the flow `dvc exp run` in
    another): stopping the worker's process group alone left them running."""
    import psutil

    from flows.local_stack import _start, stop_group

    pid_file = tmp_path / "grandchild.pid"
    spawn_detached = (
        "import subprocess, sys, time; "
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True); "
        f"open({str(pid_file)!r}, 'w').write(str(c.pid)); time.sleep(600)"
    )
    worker = _start([sys.executable, "-c", spawn_detached], {**os.environ}, None, "worker")
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    flow_run = psutil.Process(int(pid_file.read_text()))
    assert os.getpgid(flow_run.pid) != os.getpgid(worker.pid)  # out of the worker's group, as Prefect's are
    stop_group(worker)
    assert worker.poll() is not None
    psutil.wait_procs([flow_run], timeout=10)
    assert not flow_run.is_running() or flow_run.status() == psutil.STATUS_ZOMBIE


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_ctrl_c_pressed_again_while_the_ui_stops_still_stops_everything(tmp_path: Path) -> None:
    """`local_stack.py mlflow` (scripts/mlflow_ui.sh) on its own project copy: Ctrl-C, then a kill and
    Ctrl-C again while the stop runs, must not cut the stop short: the server goes and the port is free."""
    import socket
    import subprocess

    import psutil

    from flows.local_stack import free_port

    (tmp_path / "flows").mkdir()
    shutil.copy(FLOWS_DIR / "local_stack.py", tmp_path / "flows" / "local_stack.py")
    (tmp_path / "params.yaml").write_text("register:\n  tracking_uri: sqlite:///mlflow.db\n")
    port = free_port()
    stack = subprocess.Popen(
        [sys.executable, str(tmp_path / "flows" / "local_stack.py"), "mlflow", "--port", str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    servers: list[psutil.Process] = []
    try:
        assert stack.stdout is not None  # the server's own log shares it: read up to the ready line
        assert any(line.startswith(f"MLflow UI: http://127.0.0.1:{port}") for line in stack.stdout)
        servers = psutil.Process(stack.pid).children(recursive=True)
        assert servers  # the mlflow server, in a session of its own
        second = subprocess.run(
            [sys.executable, str(tmp_path / "flows" / "local_stack.py"), "mlflow", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode != 0 and f"port {port} on 127.0.0.1 is taken" in second.stderr
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGINT):
            stack.send_signal(signum)
            time.sleep(0.2)
        assert stack.wait(timeout=120) == 0
        psutil.wait_procs(servers, timeout=10)
        assert not [proc for proc in servers if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE]
    finally:  # a failed stop must not leave its server behind for the rest of the suite
        if stack.poll() is None:
            stack.kill()
        for proc in servers:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0  # nothing listens any more


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sweep_runs_each_parameter_set_as_its_own_experiment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flows_helpers import make_mini_project
    from prefect.testing.utilities import prefect_test_harness

    project = make_mini_project(tmp_path / "mini")
    monkeypatch.setenv(run_workspace.PROJECT_ROOT_ENV, str(project))  # the project this "worker" runs
    members = [{"train_steps": 300, "experiment": "sweep-a"}, {"train_steps": 200, "experiment": "sweep-b"}]
    with prefect_test_harness(server_startup_timeout=180):
        results = sweep_flows.sweep(param_sets=members, project=str(project))
        # a member run as a deployment hands its result over through the API, as read here
        from_api = sorted(result["experiment"] for result in _distill_results_from_the_api())
    assert from_api == ["sweep-a", "sweep-b"]

    assert [r["experiment"] for r in results] == ["sweep-a", "sweep-b"]
    for result in results:  # each stage's outcome, in DVC's order: both ran (new steps, a new student)
        assert list(result["stages"]) == ["prepare", "register"]
        assert all(stage["ran"] and stage["seconds"] >= 0 for stage in result["stages"].values())
    assert [r["promotion"]["decision"] for r in results] == ["promoted", "refused"]  # 0.3 first, then 0.2
    refs = _exp_refs(project)
    for member in members:
        params = yaml.safe_load(run(["git", "show", f"{refs[member['experiment']]}:params.yaml"], project).stdout)
        assert params["train"]["steps"] == member["train_steps"]
    shown = run(["dvc", "exp", "show", "--no-pager", "--csv"], project).stdout
    assert "sweep-a" in shown and "sweep-b" in shown
    client = client_for(resolve_tracking_uri("sqlite:///mlflow.db", project))
    champion = client.get_model_version_by_alias("xdistill-student", "champion")
    assert champion.tags["dvc_experiment"] == "sweep-a"
    assert run(["git", "status", "--porcelain"], project).stdout == ""
    assert yaml.safe_load((project / "params.yaml").read_text())["train"]["steps"] == 100


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_run_failing_after_registration_takes_its_model_version_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """register ran, then the experiment could not be saved: no model version may outlive the run."""
    from flows_helpers import make_mini_project
    from prefect.testing.utilities import prefect_test_harness

    project = make_mini_project(tmp_path / "mini")
    monkeypatch.setenv(run_workspace.PROJECT_ROOT_ENV, str(project))  # the project this "worker" runs

    def unsavable(workspace, *_args, **_kwargs):
        # the mini pipeline has no train stage: leave what a real one leaves (persisted checkpoints)
        (Path(workspace) / "data" / "checkpoints").mkdir(parents=True, exist_ok=True)
        (Path(workspace) / "data" / "checkpoints" / "last.pt").write_bytes(b"hours of training")
        raise RuntimeError("dvc exp push: the disk is full")

    monkeypatch.setattr(distill_flows, "push_experiment", unsavable)
    with prefect_test_harness(server_startup_timeout=180), pytest.raises(RuntimeError, match="disk is full"):
        distill_flows.distill(train_steps=300, experiment="unsaved", project=str(project))
    client = client_for(resolve_tracking_uri("sqlite:///mlflow.db", project))
    assert (project / "mlflow.db").is_file()  # the register stage did register a version
    assert client.search_model_versions("name = 'xdistill-student'") == []
    assert run(["git", "status", "--porcelain"], project).stdout == ""
    # the unsaved run trained: its workspace stays for resume_from (it was deleted with the checkpoints)
    kept = run_workspace.training_checkpoints(project.parent / f".{project.name}-exp-unsaved")
    assert [path.read_bytes() for path in kept] == [b"hours of training"]


def _distill_results_from_the_api() -> list[dict]:
    """The results of every distill flow run, read back from the Prefect API (not the process's memory)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["distill"])))
    return [run.state.result() for run in runs]


def _exp_refs(project: Path) -> dict[str, str]:
    out = run(["git", "for-each-ref", "--format=%(refname) %(objectname)", "refs/exps"], project).stdout
    return {line.split()[0].rsplit("/", 1)[-1]: line.split()[1] for line in out.splitlines() if line.strip()}
