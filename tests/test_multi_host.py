"""Hosts that share services, not a disk (docs/multi-host.md): the services, the server's promotion lock,
and two workers that share nothing but the services' network endpoints.

Every service runs on 127.0.0.1 on free ports (flows/services.py): the Prefect server, an MLflow tracking
server storing models itself, a WebDAV DVC remote and a git daemon; the two-host test runs them with
authentication, as between hosts (tests/test_service_auth.py tests the refusals). The two "hosts" are two folders with
their own HOME, Prefect home, caches, DVC cache and temporary folder; the project is the two-stage pipeline
of tests/flows_helpers.py (a copied student, the real register stage).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from flows.local_stack import _start, free_port, stop_group
from flows.services import Credentials, Services
from testbed.pipeline_project import REPO_ROOT, run
from xdistill.errors import XdistillError
from xdistill.registry.store import client_for, resolve_tracking_uri

MODEL_NAME = "xdistill-student"


def test_an_env_tracking_uri_is_the_variables_value_and_unset_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://10.0.0.5:5000")
    assert resolve_tracking_uri("env:MLFLOW_TRACKING_URI", tmp_path) == "http://10.0.0.5:5000"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db")  # a relative store still resolves
    assert resolve_tracking_uri("env:MLFLOW_TRACKING_URI", tmp_path) == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    with pytest.raises(XdistillError, match="environment variable MLFLOW_TRACKING_URI is not set"):
        resolve_tracking_uri("env:MLFLOW_TRACKING_URI", tmp_path)


def test_experiment_names_are_checked_against_the_experiments_git_remote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With XDISTILL_EXP_REMOTE a run refuses a name another host already pushed there, before it trains."""
    from flows_helpers import make_mini_project

    from flows.workspace import EXP_REMOTE_ENV, check_new_experiment, experiment_remote

    project = make_mini_project(tmp_path / "checkout")
    bare = tmp_path / "remote.git"
    run(["git", "init", "-q", "--bare", str(bare)], tmp_path)
    run(["git", "remote", "add", "origin", str(bare)], project)
    run(["git", "push", "-q", "origin", "HEAD:refs/exps/ab/cdef0123/taken"], project)
    monkeypatch.delenv(EXP_REMOTE_ENV, raising=False)
    assert experiment_remote(project) is None
    check_new_experiment(project, "taken")  # one host: only the project's own experiments count
    monkeypatch.setenv(EXP_REMOTE_ENV, "origin")
    assert experiment_remote(project) == str(bare)
    with pytest.raises(ValueError, match=f"DVC experiment 'taken' already exists on {bare}"):
        check_new_experiment(project, "taken")
    check_new_experiment(project, "free")
    monkeypatch.setenv(EXP_REMOTE_ENV, "upstream")
    with pytest.raises(ValueError, match="XDISTILL_EXP_REMOTE=upstream: .* has no git remote of that name"):
        experiment_remote(project)


# --- the promotion lock of a tracking server ------------------------------------------------------


@pytest.fixture()
def mlflow_server(tmp_path: Path) -> Iterator[str]:
    """An MLflow tracking server (database store, proxied artifacts) as the services start it."""
    services = Services("127.0.0.1", tmp_path / "services", {"mlflow": free_port()})
    try:
        services.start_mlflow()
        yield services.url("mlflow")
    finally:
        services.stop()


# Promotes one version with the gate slowed down (judge sleeps hold_s), in a process of its own with a
# cache of its own: no file lock of one could serialise it with another.
_SLOW_PROMOTE = """
import json, sys, time
import xdistill.registry.promotion as promotion
from xdistill.registry.gate import PromoteConfig
hold_s, judge = float(sys.argv[1]), promotion.judge
def slow_judge(*args, **kwargs):
    time.sleep(hold_s)
    return judge(*args, **kwargs)
promotion.judge = slow_judge
result = promotion.promote(sys.argv[3], sys.argv[4], tracking_uri=sys.argv[2], config=PromoteConfig(margin=0.0))
print(json.dumps(result.as_dict()))
"""


def _promote_process(uri: str, version: str, hold_s: float, home: Path) -> subprocess.Popen[str]:
    home.mkdir(parents=True)
    env = {**os.environ, "HOME": str(home), "XDISTILL_CACHE_DIR": str(home / "cache")}
    cmd = [sys.executable, "-c", _SLOW_PROMOTE, str(hold_s), uri, MODEL_NAME, version]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_racing_promotions_on_a_tracking_server_leave_one_champion(mlflow_server: str, tmp_path: Path) -> None:
    """The better candidate starts first and decides slowly; the worse one starts meanwhile, from another
    "host" (its own HOME and cache). Without a lock in the server both judge against the old champion and
    the worse one, setting the alias last, ends up champion."""
    from registry_helpers import cheap_version

    from xdistill.registry.promotion import champion_history, promote
    from xdistill.registry.scores import Scores
    from xdistill.registry.server_lock import live_tickets

    uri = mlflow_server
    refs = {"student-untrained": Scores(0.40, {"de": 0.40}), "teacher": Scores(0.9, {"en": 0.8})}
    v1 = cheap_version(uri, 0.50, {"en": 0.8, "de": 0.50}, references=refs)
    assert promote(MODEL_NAME, v1, tracking_uri=uri).decision == "promoted"
    worse = cheap_version(uri, 0.60, {"en": 0.8, "de": 0.60}, references=refs)
    best = cheap_version(uri, 0.70, {"en": 0.8, "de": 0.70}, references=refs)

    first = _promote_process(uri, best, 3.0, tmp_path / "host-a")
    time.sleep(1.0)
    second = _promote_process(uri, worse, 0.0, tmp_path / "host-b")
    outcomes = {}
    for proc in (first, second):
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        outcomes[json.loads(out)["candidate"]] = json.loads(out)

    client = client_for(uri)
    assert client.get_model_version_by_alias(MODEL_NAME, "champion").version == best
    assert _champions(client) == [best]
    assert champion_history(MODEL_NAME, tracking_uri=uri) == [v1, best]
    assert outcomes[best]["decision"] == "promoted" and outcomes[best]["previous_champion"] == v1
    # it waited for the server's lock and met the new champion
    assert outcomes[worse]["decision"] == "refused" and outcomes[worse]["previous_champion"] == best
    assert live_tickets(client) == []  # every promoter gave its ticket back


def _champions(client) -> list[str]:
    """The versions holding the alias (searches leave aliases out: each version is read)."""
    versions = [
        client.get_model_version(MODEL_NAME, v.version) for v in client.search_model_versions(f"name = '{MODEL_NAME}'")
    ]
    return sorted(v.version for v in versions if "champion" in v.aliases)


_HOLD_LOCK = """
import sys, time
from xdistill.registry.store import promotion_lock
with promotion_lock(sys.argv[1]):
    print("holding", flush=True)
    time.sleep(600)
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_crashed_holder_of_the_servers_lock_is_waited_out_for_its_lease(
    mlflow_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import xdistill.registry.server_lock as server_lock
    from xdistill.registry.store import PromotionLockBusy, promotion_lock

    holder = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, mlflow_server], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        monkeypatch.setattr("xdistill.registry.store.PROMOTION_LOCK_TIMEOUT_S", 2.0)
        with pytest.raises(PromotionLockBusy, match="another promotion held the lock"), promotion_lock(mlflow_server):
            pass  # a live holder: waited for, never taken over within the lease
        holder.send_signal(signal.SIGKILL)  # crashed: its ticket stays in the server
        holder.wait(timeout=30)
        client = client_for(mlflow_server)
        assert len(server_lock.live_tickets(client)) == 1
        monkeypatch.setattr(server_lock, "LEASE_S", 3.0)
        monkeypatch.setattr("xdistill.registry.store.PROMOTION_LOCK_TIMEOUT_S", 60.0)
        started = time.monotonic()
        with promotion_lock(mlflow_server) as where:
            waited = time.monotonic() - started
            assert "xdistill-promotion-lock version" in where and len(server_lock.live_tickets(client)) == 1
        assert 3.0 <= waited < 30.0
        assert server_lock.live_tickets(client) == []
    finally:
        if holder.poll() is None:
            holder.kill()


# --- two hosts sharing only the services ------------------------------------------------------------


def _mini_project_with_flows(dest: Path) -> Path:
    """The two-stage project of tests/flows_helpers.py with the flows, the profiles and prefect-remote.yaml,
    as a team's repository holds them."""
    from flows_helpers import make_mini_project

    project = make_mini_project(dest)
    shutil.copytree(REPO_ROOT / "flows", project / "flows", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO_ROOT / "profiles", project / "profiles")
    shutil.copy(REPO_ROOT / "prefect-remote.yaml", project / "prefect-remote.yaml")
    run(["git", "add", "-A"], project)
    run(["git", "commit", "-qm", "flows, profiles, remote deployments"], project)
    return project


def _host_env(services: Services, host: Path) -> dict[str, str]:
    """A host's environment: its own HOME, caches and temporary folder; the services' env file."""
    from xdistill.env import child_env

    for folder in ("home", "prefect", "cache", "tmp", "dvc-cache"):
        (host / folder).mkdir(parents=True, exist_ok=True)
    # the host's own git identity (DVC commits each experiment)
    (host / "home" / ".gitconfig").write_text(f"[user]\n\tname = {host.name}\n\temail = {host.name}@xdistill.invalid\n")
    return child_env(
        **services.client_env(),
        HOME=str(host / "home"),
        PREFECT_HOME=str(host / "prefect"),
        XDG_CACHE_HOME=str(host / "cache"),
        XDISTILL_CACHE_DIR=str(host / "cache" / "xdistill"),
        XDISTILL_DVC_CACHE=str(host / "dvc-cache"),
        TMPDIR=str(host / "tmp"),
        PREFECT_WORKER_QUERY_SECONDS="2",
        PREFECT_SERVER_DATABASE_TIMEOUT="60",
    )


def _checked(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def _flow_runs_in(worker_log: Path) -> set[str]:
    """The flow runs that ran in a worker's processes (each logs its page; a submission another worker won
    first is only logged as aborted)."""
    return set(re.findall(r"/runs/flow-run/([0-9a-f]{8}-(?:[0-9a-f]{4}-){3}[0-9a-f]{12})", worker_log.read_text()))


_SWEEP = """
import json, sys
from flows.sweep import sweep
members = [{"train_steps": 300, "experiment": "wide-300"}, {"train_steps": 200, "experiment": "wide-200"}]
print("SWEEP " + json.dumps(sweep(param_sets=members, deployment="distill/remote", max_parallel=2)))
"""


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_two_hosts_share_only_the_services(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ports = {service: free_port() for service in ("prefect", "mlflow", "webdav", "git")}
    # with authentication, as on a network (every host has the credentials from the env file)
    credentials = Credentials.generate({})
    services = Services("127.0.0.1", tmp_path / "services", ports, credentials=credentials)
    for name, value in credentials.client_env().items():  # this process reads the registry below
        monkeypatch.setenv(name, value)
    project = _mini_project_with_flows(tmp_path / "team-checkout")
    dvc = [sys.executable, "-m", "dvc"]
    workers: list[subprocess.Popen[bytes]] = []
    try:
        services.start(seed=project)
        deployer = _host_env(services, tmp_path / "deployer")
        _checked(
            [sys.executable, "-m", "prefect", "--no-prompt", "deploy", "--prefect-file", "prefect-remote.yaml"]
            + ["--name", "distill/remote"],
            project,
            deployer,
        )
        for name in ("host-a", "host-b"):
            cmd = [sys.executable, "-m", "prefect", "worker", "start", "--pool", "remote", "--type", "process"]
            env = _host_env(services, tmp_path / name)
            workers.append(
                _start([*cmd, "--limit", "1", "--name", name], env, tmp_path / name / "logs", "worker", tmp_path / name)
            )
        sweep = _checked([sys.executable, "-c", _SWEEP], REPO_ROOT, _host_env(services, tmp_path / "sweeper"), 900)
        results = json.loads(sweep.split("SWEEP ", 1)[1].splitlines()[0])
        assert [result.get("failed") for result in results] == [None, None], results
        for worker in workers:
            stop_group(worker)

        # one member on each worker: each host's log names one flow run, not the other's
        taken = {name: _flow_runs_in(tmp_path / name / "logs" / "worker.log") for name in ("host-a", "host-b")}
        assert [len(ids) for ids in taken.values()] == [1, 1] and taken["host-a"] != taken["host-b"], taken

        # both experiments on the git remote, their data on the DVC remote (WebDAV)
        remote_refs = _checked(["git", "ls-remote", services.git_remote, "refs/exps/*"], tmp_path, deployer)
        assert "/wide-300" in remote_refs and "/wide-200" in remote_refs
        assert list((services.state / "webdav" / "dvc" / "files" / "md5").rglob("*"))

        # both versions in the one registry, their models stored by the server; exactly one champion
        client = client_for(services.url("mlflow"))
        versions = client.search_model_versions(f"name = '{MODEL_NAME}'")
        assert sorted(v.tags["dvc_experiment"] for v in versions) == ["wide-200", "wide-300"]
        champions = [client.get_model_version(MODEL_NAME, v) for v in _champions(client)]
        assert [v.tags["dvc_experiment"] for v in champions] == ["wide-300"]  # 0.3 passes the gate, 0.2 does not
        for version in versions:
            assert client.get_run(version.run_id).info.artifact_uri.startswith("mlflow-artifacts:/")
        assert list((services.state / "mlflow" / "artifacts").rglob("model.safetensors"))

        # a third host brings the champion's experiment back and reproduces it: nothing re-runs
        third = tmp_path / "host-c"
        env = _host_env(services, third)
        _checked(["git", "clone", "--quiet", services.git_remote, "checkout"], third, env)
        checkout = third / "checkout"
        _checked([*dvc, "remote", "add", "--local", "--default", "services", services.dvc_remote], checkout, env)
        for option, value in (("user", credentials.dvc_user), ("password", credentials.dvc_password)):
            _checked([*dvc, "remote", "modify", "--local", "services", option, value], checkout, env)
        _checked([*dvc, "cache", "dir", "--local", str(third / "dvc-cache")], checkout, env)
        assert not list((third / "dvc-cache").rglob("*.*"))  # nothing of the run's data on this host yet
        _checked([*dvc, "exp", "pull", "origin", "wide-300"], checkout, env)  # the ref from git, the data from WebDAV
        _checked([*dvc, "exp", "apply", "wide-300"], checkout, env)
        assert "Everything is up to date" in _checked([*dvc, "pull"], checkout, env)
        assert (checkout / "models" / "student" / "modules.json").is_file()
        repro = _checked([*dvc, "repro"], checkout, env)
        assert "Running stage" not in repro and "didn't change, skipping" in repro, repro
        assert "up to date" in _checked([*dvc, "status"], checkout, env)
        summary = json.loads((checkout / "metrics" / "eval" / "summary.json").read_text())
        registered = json.loads((checkout / "metrics" / "register.json").read_text())
        assert summary["primary_score"] == 0.3 and registered["model_version"] == champions[0].version
        params = yaml.safe_load((checkout / "params.yaml").read_text())
        assert params["register"]["tracking_uri"] == "env:MLFLOW_TRACKING_URI"  # the multi-host profile
    finally:
        for worker in workers:
            with contextlib.suppress(Exception):
                stop_group(worker)
        services.stop()
