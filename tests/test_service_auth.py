"""The multi-host services authenticate (flows/services.py): MLflow's basic-auth app, Prefect's API auth
string and the WebDAV DVC remote's account refuse an anonymous request and serve the env file's credentials;
nothing listens beyond the loopback address without them.

The servers run on 127.0.0.1 on free ports, started once for the module (about 30 s on 2 cores).
"""

from __future__ import annotations

import stat
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from http_helpers import http_status as _status

from flows import services as services_cli
from flows.local_stack import free_port
from flows.services import SECRETS_FILE, Credentials, Services, is_loopback, services_credentials
from testbed.pipeline_project import run

pytestmark = pytest.mark.slow  # every test here is over ~4 s, or shares a fixture that is


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    state = tmp_path_factory.mktemp("services")
    credentials = services_credentials(state)
    ports = {service: free_port() for service in ("prefect", "mlflow", "webdav")}
    running = Services("127.0.0.1", state, ports, credentials=credentials)
    try:
        running.start_webdav()
        with ThreadPoolExecutor(2) as pool:  # the two slow starts side by side
            for future in [pool.submit(running.start_mlflow), pool.submit(running.start_prefect)]:
                future.result()
        yield running
    finally:
        running.stop()


def _creds(services: Services) -> Credentials:
    assert services.credentials is not None
    return services.credentials


def test_services_beyond_the_loopback_address_are_refused_without_credentials(tmp_path: Path) -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("10.0.0.5") and not is_loopback("0.0.0.0") and not is_loopback("hostname")
    for host in ("10.0.0.5", "0.0.0.0", "::"):
        open_services = Services(host, tmp_path / "state")
        with pytest.raises(RuntimeError, match=f"refusing to listen on {host} without authentication"):
            open_services.start(None)
        for start in (open_services.start_mlflow, open_services.start_prefect, open_services.start_webdav):
            with pytest.raises(RuntimeError, match="without authentication"):
                start()
    assert not (tmp_path / "state").exists()  # refused before anything was made
    with pytest.raises(SystemExit, match=r"--no-auth refused: services on 10\.0\.0\.5 .* must authenticate"):
        services_cli.main(["up", "--host", "10.0.0.5", "--no-auth", "--dir", str(tmp_path / "state")])
    assert not (tmp_path / "state").exists()

    # with credentials: no git daemon (it cannot authenticate); the git remote is the bare repository over SSH
    remote = Services("10.0.0.5", tmp_path / "state", credentials=Credentials.generate({}))
    assert not remote.git_daemon and remote.git_remote == f"ssh://10.0.0.5{tmp_path}/state/git/xdistill.git"
    assert Services("127.0.0.1", tmp_path / "state").git_remote.startswith("git://127.0.0.1:")


def test_credentials_are_kept_private_and_fixed_after_the_first_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in Credentials.ENV.values():
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "chosen-by-the-team")
    state = tmp_path / "state"
    made = services_credentials(state)
    assert made.mlflow_password == "chosen-by-the-team" and len(made.dvc_password) >= 24
    assert stat.S_IMODE((state / SECRETS_FILE).stat().st_mode) == 0o600
    assert services_credentials(state) == made  # kept: the same on every start
    env_file = Services("127.0.0.1", state, credentials=made).write_env_file()
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert "MLFLOW_FLASK_SERVER_SECRET_KEY" not in env_file.read_text()  # the server's own secret stays there
    assert f"export XDISTILL_DVC_PASSWORD={made.dvc_password}" in env_file.read_text()

    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "another-password")
    with pytest.raises(ValueError, match="MLFLOW_TRACKING_PASSWORD is set to another value"):
        services_credentials(state)
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD")
    (state / SECRETS_FILE).chmod(0o644)
    with pytest.raises(PermissionError, match=r"readable by others \(mode 644\): chmod 600"):
        services_credentials(state)
    (state / SECRETS_FILE).unlink()
    (state / "mlflow").mkdir()
    (state / "mlflow" / "basic_auth.db").write_bytes(b"")
    with pytest.raises(ValueError, match="secrets.env is gone but .*basic_auth.db holds the MLflow admin"):
        services_credentials(state)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "short")
    with pytest.raises(ValueError, match="at least 12 characters"):
        Credentials.generate()


@pytest.mark.timeout(600)
def test_mlflow_refuses_anonymous_requests_and_serves_the_clients_account(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    creds = _creds(services)
    search = f"{services.url('mlflow')}/api/2.0/mlflow/experiments/search?max_results=1"
    assert _status(search) == 401
    assert _status(search, auth=(creds.mlflow_user, "not-the-password")) == 401
    assert _status(search, auth=(creds.mlflow_user, creds.mlflow_password)) == 200
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", creds.mlflow_user)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", creds.mlflow_password)
    client = MlflowClient(services.url("mlflow"))
    experiment = client.create_experiment("authenticated")
    run_id = client.create_run(experiment).info.run_id
    client.log_text(run_id, "through the server", "note.txt")  # the artifact proxy authenticates too
    assert list((services.state / "mlflow" / "artifacts").rglob("note.txt"))
    assert client.get_experiment_by_name("authenticated").experiment_id == experiment


@pytest.mark.timeout(600)
def test_prefect_refuses_anonymous_requests_and_serves_the_auth_string(services: Services) -> None:
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    creds = _creds(services)
    pools = f"{services.prefect_api}/work_pools/filter"
    assert _status(f"{services.prefect_api}/health") == 200  # the health check stays open
    assert _status(pools, "POST", data=b"{}") == 401
    assert _status(pools, "POST", auth=("xdistill", "not-the-password"), data=b"{}") == 401
    settings = {PREFECT_API_URL: services.prefect_api, PREFECT_API_AUTH_STRING: creds.prefect_auth}
    with temporary_settings(updates=settings), get_client(sync_client=True) as client:
        assert "remote" in [pool.name for pool in client.read_work_pools()]  # made by `up` with the string


@pytest.mark.timeout(600)
def test_the_webdav_remote_refuses_anonymous_requests_and_takes_a_dvc_push(
    services: Services, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from xdistill.env import child_env

    creds = _creds(services)
    share = services.dvc_remote.replace("webdav://", "http://", 1)
    assert _status(f"{share}/") == 401
    assert _status(f"{share}/planted", "PUT", data=b"anonymous") == 401
    assert not (services.state / "webdav" / "dvc" / "planted").exists()

    repo = tmp_path / "repo"
    repo.mkdir()
    run(["git", "init", "-q"], repo)
    run(["dvc", "init", "-q"], repo)
    (repo / "data.txt").write_text("pushed with the account\n", encoding="utf-8")
    run(["dvc", "add", "-q", "data.txt"], repo)
    run(["dvc", "remote", "add", "--local", "--default", "services", services.dvc_remote], repo)
    monkeypatch.setenv("XDISTILL_DVC_USER", creds.dvc_user)
    monkeypatch.setenv("XDISTILL_DVC_PASSWORD", creds.dvc_password)
    services_cli.set_dvc_credentials(repo)  # what `flows/services.py checkout` does in a worker's clone
    assert stat.S_IMODE((repo / ".dvc" / "config.local").stat().st_mode) == 0o600
    pushed = subprocess.run(
        [sys.executable, "-m", "dvc", "push"], cwd=repo, env=child_env(), capture_output=True, text=True, check=False
    )
    assert pushed.returncode == 0, pushed.stderr
    stored = [path for path in (services.state / "webdav" / "dvc" / "files" / "md5").rglob("*") if path.is_file()]
    assert [path.read_text(encoding="utf-8") for path in stored] == ["pushed with the account\n"]
