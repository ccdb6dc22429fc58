"""Start a local Prefect stack for this project: server + UI, work pools, deployments, a worker.

    python flows/local_stack.py                 # UI on http://127.0.0.1:4200, Ctrl-C stops all
    python flows/local_stack.py --port 4300 --gpu-worker

Everything binds to 127.0.0.1; Prefect's state lives in ``<project>/.prefect`` (``PREFECT_HOME``).
The same functions start and stop the stack in the end-to-end test, so the README's command
is the tested path. Workers are stopped before the server (a worker whose server vanished
hangs on SIGTERM).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
POOLS = {"cpu": "default", "gpu": "gpu"}  # work pool -> the queue its deployments use
STARTUP_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0


@dataclass
class LocalStack:
    """A running Prefect server and the workers started against it."""

    home: Path
    port: int
    server: subprocess.Popen[bytes] | None = None
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    log_dir: Path | None = None

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """Environment of every Prefect client of this stack (CLI, workers, flows)."""
        from xdistill.env import child_env

        return child_env(PREFECT_HOME=str(self.home), PREFECT_API_URL=self.api_url,
                         PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="90")

    def _log(self, name: str):  # noqa: ANN202 - a file object or DEVNULL
        if self.log_dir is None:
            return None
        self.log_dir.mkdir(parents=True, exist_ok=True)
        return open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process

    def start_server(self) -> None:
        """``prefect server start`` on 127.0.0.1; returns once /api/health answers."""
        self.home.mkdir(parents=True, exist_ok=True)
        out = self._log("server")
        self.server = subprocess.Popen(
            [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(self.port)],
            env=self.env(), stdout=out, stderr=subprocess.STDOUT if out else None, start_new_session=True,
        )
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.server.poll() is not None:
                raise RuntimeError(f"prefect server exited with {self.server.returncode} (see {self.log_dir})")
            try:
                with urllib.request.urlopen(f"{self.api_url}/health", timeout=5) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(1)
        raise RuntimeError(f"prefect server did not answer on {self.api_url} within {STARTUP_TIMEOUT_S:.0f} s")

    def prefect(self, *args: str, cwd: Path = PROJECT_ROOT) -> str:
        """Run a ``prefect`` CLI command against this stack; raise with its output on failure."""
        proc = subprocess.run([sys.executable, "-m", "prefect", *args], cwd=cwd, env=self.env(),
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"prefect {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
        return proc.stdout

    def create_pools(self) -> None:
        for pool in POOLS:
            self.prefect("work-pool", "create", pool, "--type", "process", "--overwrite")

    def deploy(self, project: Path = PROJECT_ROOT) -> None:
        """Apply every deployment of ``project``/prefect.yaml (working directory: ``project``)."""
        self.prefect("--no-prompt", "deploy", "--all", cwd=project)

    def start_worker(self, pool: str = "cpu", extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        out = self._log(f"worker-{pool}-{len(self.workers)}")
        worker = subprocess.Popen(
            [sys.executable, "-m", "prefect", "worker", "start", "--pool", pool, "--type", "process"],
            env={**self.env(), **(extra_env or {})}, stdout=out, stderr=subprocess.STDOUT if out else None,
            start_new_session=True,
        )
        self.workers.append(worker)
        return worker

    def stop(self) -> None:
        """Stop the workers (and the flow runs they started), then the server."""
        for worker in self.workers:
            _stop_group(worker)
        self.workers.clear()
        if self.server is not None:
            _stop_group(self.server)
            self.server = None


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group started with ``proc``, SIGKILL it if it lingers."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=STOP_TIMEOUT_S)
    except ProcessLookupError:
        pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=4200)
    parser.add_argument("--home", type=Path, default=PROJECT_ROOT / ".prefect", help="PREFECT_HOME")
    parser.add_argument("--gpu-worker", action="store_true", help="also start a worker on the gpu pool")
    parser.add_argument("--no-worker", action="store_true", help="server, pools and deployments only")
    args = parser.parse_args(argv)

    stack = LocalStack(home=args.home.resolve(), port=args.port, log_dir=args.home.resolve() / "logs")
    # Ctrl-C or a plain `kill` both end in the orderly stop below (a background shell job
    # starts with SIGINT ignored, so install the handler explicitly).
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _interrupt)
    try:
        stack.start_server()
        stack.create_pools()
        stack.deploy()
        if not args.no_worker:
            stack.start_worker("cpu")
            if args.gpu_worker:
                stack.start_worker("gpu")
        print(f"Prefect UI: {stack.ui_url}  (API {stack.api_url}; logs in {stack.log_dir})")
        print("Deployments: distill/cpu, distill/gpu, stage/gpu, sweep/cpu. Ctrl-C stops everything.")
        while stack.server is not None and stack.server.poll() is None:
            time.sleep(1)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        stack.stop()


if __name__ == "__main__":
    sys.exit(main())
