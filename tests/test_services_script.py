"""``scripts/services_up.sh`` end to end, as an operator runs it: it starts Prefect, MLflow, the WebDAV DVC
remote and the git remote on 127.0.0.1 (free ports), writes the env file that every host sources, and serves
what that file names with its credentials only; Ctrl-C (SIGINT) stops every service and frees every port.

About a minute on 2 cores (the Prefect server's start).
"""

from __future__ import annotations

import shlex
import signal
import socket
import stat
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from http_helpers import http_status

from flows.local_stack import free_port
from testbed.pipeline_project import init_git_dvc, run
from xdistill.env import child_env

ROOT = Path(__file__).resolve().parent.parent
READY = "On every host: source"
pytestmark = pytest.mark.slow


def _env_file(path: Path) -> dict[str, str]:
    """The ``export NAME=value`` lines of the env file, as a shell would read them."""
    values = {}
    for line in path.read_text().splitlines():
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").partition("=")
            values[name] = shlex.split(value)[0] if value else ""
    return values


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_services_up_serves_the_env_files_endpoints_and_ctrl_c_stops_them(tmp_path: Path) -> None:
    seed = tmp_path / "seed"
    seed.mkdir()
    init_git_dvc(seed)
    (seed / "params.yaml").write_text(yaml.safe_dump({"train": {"steps": 1}}))
    run(["git", "add", "params.yaml", ".dvc", ".dvcignore"], seed)
    run(["git", "commit", "-q", "-m", "seed"], seed)
    ports = {service: free_port() for service in ("prefect", "mlflow", "webdav", "git")}
    options = [f"--{service}-port={port}" for service, port in ports.items()]
    state = tmp_path / "services"
    log = (tmp_path / "services_up.log").open("w+")
    script = subprocess.Popen(
        ["bash", "scripts/services_up.sh", "--dir", str(state), "--seed", str(seed), *options],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=child_env(HOME=str(tmp_path / "home")),
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while READY not in Path(log.name).read_text() and script.poll() is None and time.monotonic() < deadline:
            time.sleep(1)
        output = Path(log.name).read_text()
        assert READY in output, output[-3000:]

        env_path = state / "multi-host.env"
        assert stat.S_IMODE(env_path.stat().st_mode) == 0o600
        env = _env_file(env_path)
        secrets = [env["MLFLOW_TRACKING_PASSWORD"], env["XDISTILL_DVC_PASSWORD"], env["PREFECT_API_AUTH_STRING"]]
        assert not any(secret in output for secret in secrets)  # never a secret on the terminal
        assert "GIT_SSH_COMMAND" not in env  # on the loopback address the git remote is git's daemon

        mlflow = (env["MLFLOW_TRACKING_USERNAME"], env["MLFLOW_TRACKING_PASSWORD"])
        experiments = f"{env['MLFLOW_TRACKING_URI']}/api/2.0/mlflow/experiments/search?max_results=1"
        assert http_status(experiments) == 401 and http_status(experiments, auth=mlflow) == 200
        user, _, password = env["PREFECT_API_AUTH_STRING"].partition(":")
        prefect = (user, password)
        pools = f"{env['PREFECT_API_URL']}/work_pools/filter"
        assert http_status(pools, "POST", data=b"{}") == 401
        assert http_status(pools, "POST", auth=prefect, data=b"{}") == 200
        webdav = env["XDISTILL_DVC_REMOTE"].replace("webdav://", "http://", 1) + "/"
        dvc_user = (env["XDISTILL_DVC_USER"], env["XDISTILL_DVC_PASSWORD"])
        assert http_status(webdav, "PROPFIND", headers={"Depth": "0"}) == 401
        assert http_status(webdav, "PROPFIND", auth=dvc_user, headers={"Depth": "0"}) in (200, 207)
        heads = run(["git", "ls-remote", env["XDISTILL_GIT_REMOTE"], "HEAD"], tmp_path).stdout
        assert heads.split()[0] == run(["git", "rev-parse", "HEAD"], seed).stdout.strip()

        script.send_signal(signal.SIGINT)  # Ctrl-C
        assert script.wait(timeout=120) == 0
        assert not [service for service, port in ports.items() if _listening(port)]
    finally:
        if script.poll() is None:
            script.kill()
            script.wait()
        log.close()
