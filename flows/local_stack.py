"""The project's local UIs: a Prefect stack (server + UI, work pools, deployments, a worker) and the MLflow UI.

    python flows/local_stack.py prefect               # Prefect UI on http://127.0.0.1:4200, Ctrl-C stops all
    python flows/local_stack.py prefect --port 4300 --gpu-worker           # + a gpu worker for all GPUs
    python flows/local_stack.py prefect --gpu-worker-per-gpu               # + a gpu worker per visible GPU
    python flows/local_stack.py mlflow                # MLflow UI on http://127.0.0.1:5000 over the project's store

``scripts/prefect_up.sh`` and ``scripts/mlflow_ui.sh`` run these. Everything binds to 127.0.0.1;
Prefect's state lives in ``<project>/.prefect`` (``PREFECT_HOME``). The browser tests start and
stop both UIs with the same classes, so the README's commands are the tested path. Workers are
stopped before the server (a worker whose server vanished hangs on SIGTERM). Every gpu worker runs
one flow run at a time (``--limit 1``): two runs never share its GPUs (docs/gpu.md).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import psutil

PROJECT_ROOT = Path(__file__).resolve().parent.parent
POOLS = {"cpu": "default", "gpu": "gpu"}  # work pool -> the queue its deployments use
# Seconds to wait for a server to answer: ~5-10 s on a quiet machine, minutes on a loaded 2-core one.
STARTUP_TIMEOUT_S = 600.0
STOP_TIMEOUT_S = 20.0
# Prefect's sqlite store waits this long for a lock (default 10 s): on a loaded 2-core machine the
# worker's and the services' writes hold it longer, and the UI shows "Something went wrong" on a 503.
DATABASE_TIMEOUT_S = "60"


def _log_file(log_dir: Path | None, name: str) -> IO[bytes] | None:
    if log_dir is None:
        return None
    log_dir.mkdir(parents=True, exist_ok=True)
    return open(log_dir / f"{name}.log", "ab")  # the child holds its own copy; see _start


def _start(
    cmd: list[str], env: dict[str, str], log_dir: Path | None, name: str, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start a server process in its own session (so stopping it stops its children too)."""
    out = _log_file(log_dir, name)
    try:
        return subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT if out else None, start_new_session=True
        )
    finally:
        if out is not None:
            out.close()  # the child writes through its own descriptor


def require_free_port(port: int, what: str) -> None:
    """Refuse a port something already listens on: a stale stack would answer the health check in place of
    the new server (which then dies on "address in use"), and the pools and deployments would go to it."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            raise RuntimeError(
                f"{what}: port {port} on 127.0.0.1 is taken (a stack still running? stop it, or choose another --port)"
            ) from None


def wait_until_up(proc: subprocess.Popen[bytes], url: str, what: str, log_dir: Path | None) -> None:
    """Return once ``url`` answers 200; raise when ``proc`` exits or STARTUP_TIMEOUT_S passes."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} (see {log_dir or 'its output'})")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200 and proc.poll() is None:  # ours answers, not one that was there
                    return
        except OSError:
            time.sleep(1)
    raise RuntimeError(f"{what} did not answer on {url} within {STARTUP_TIMEOUT_S:.0f} s")


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

        return child_env(
            PREFECT_HOME=str(self.home),
            PREFECT_API_URL=self.api_url,
            PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="90",
            PREFECT_SERVER_DATABASE_TIMEOUT=DATABASE_TIMEOUT_S,
            PREFECT_API_LOG_RETRYABLE_ERRORS="true",
        )

    def start_server(self) -> None:
        """``prefect server start`` on 127.0.0.1; returns once /api/health answers."""
        self.home.mkdir(parents=True, exist_ok=True)
        require_free_port(self.port, "prefect server")
        self.server = _start(
            [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(self.port)],
            self.env(),
            self.log_dir,
            "server",
        )
        wait_until_up(self.server, f"{self.api_url}/health", "prefect server", self.log_dir)

    def prefect(self, *args: str, cwd: Path = PROJECT_ROOT) -> str:
        """Run a ``prefect`` CLI command against this stack; raise with its output on failure."""
        proc = subprocess.run(
            [sys.executable, "-m", "prefect", *args],
            cwd=cwd,
            env=self.env(),
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"prefect {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
        return proc.stdout

    def create_pools(self) -> None:
        for pool in POOLS:
            self.prefect("work-pool", "create", pool, "--type", "process", "--overwrite")

    def deploy(self, project: Path = PROJECT_ROOT) -> None:
        """Apply every deployment of ``project``/prefect.yaml (working directory: ``project``)."""
        self.prefect("--no-prompt", "deploy", "--all", cwd=project)

    def start_worker(
        self,
        pool: str = "cpu",
        extra_env: dict[str, str] | None = None,
        limit: int | None = None,
        name: str | None = None,
    ) -> subprocess.Popen[bytes]:
        """A process worker on ``pool``; ``limit``: flow runs at once (None: any number); ``extra_env``
        reaches its flow runs unless the deployment's job variables set the same variable."""
        cmd = [sys.executable, "-m", "prefect", "worker", "start", "--pool", pool, "--type", "process"]
        cmd += ["--limit", str(limit)] if limit is not None else []
        cmd += ["--name", name] if name else []
        worker = _start(
            cmd, {**self.env(), **(extra_env or {})}, self.log_dir, name or f"worker-{pool}-{len(self.workers)}"
        )
        self.workers.append(worker)
        return worker

    def start_gpu_workers(self, per_gpu: bool) -> list[str]:
        """Workers on the gpu pool, each with ``--limit 1``: one per visible GPU (``CUDA_VISIBLE_DEVICES``
        set to it) or, without ``per_gpu``, one for all of them (a run trains on every GPU: train_processes
        auto). Returns each worker's GPUs."""
        gpus = visible_gpus()
        if not gpus:
            raise RuntimeError("no GPU visible (CUDA_VISIBLE_DEVICES or nvidia-smi): start no gpu worker here")
        host = socket.gethostname()
        if not per_gpu:
            self.start_worker("gpu", limit=1, name=f"{host}-gpu")
            return [",".join(gpus)]
        for gpu in gpus:
            self.start_worker("gpu", {"CUDA_VISIBLE_DEVICES": gpu}, limit=1, name=f"{host}-gpu{gpu}")
        return gpus

    def stop(self) -> None:
        """Stop the workers (and the flow runs they started), then the server."""
        for worker in self.workers:
            stop_group(worker)
        self.workers.clear()
        if self.server is not None:
            stop_group(self.server)
            self.server = None


@dataclass
class MlflowUi:
    """``mlflow server`` over a project's tracking store (params.yaml ``register.tracking_uri``)."""

    project: Path
    port: int
    log_dir: Path | None = None
    server: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def store(self) -> str:
        """The project's store as an absolute URI (``sqlite:///mlflow.db`` -> the project's mlflow.db)."""
        from xdistill.io import load_params
        from xdistill.registry.store import resolve_tracking_uri

        register = load_params("register", self.project / "params.yaml")
        return resolve_tracking_uri(register.get("tracking_uri"), self.project)

    def start(self) -> None:
        """Start the UI on 127.0.0.1; returns once /health answers."""
        from xdistill.env import child_env

        store = self.store()
        if store.startswith(("http://", "https://")):
            raise ValueError(f"the project tracks to the server {store}: open its UI there")
        # Without MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false, stopping the server leaves orphan
        # job-runner processes behind; one worker answers in seconds.
        env = child_env(MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
        require_free_port(self.port, "mlflow server")
        self.server = _start(
            [
                sys.executable,
                "-m",
                "mlflow",
                "server",
                "--backend-store-uri",
                store,
                "--registry-store-uri",
                store,
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                "1",
            ],
            env,
            self.log_dir,
            "mlflow",
            cwd=self.project,
        )
        wait_until_up(self.server, f"{self.url}/health", "mlflow server", self.log_dir)

    def stop(self) -> None:
        if self.server is not None:
            stop_group(self.server)
            self.server = None


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process started with ``proc``, its process group and every descendant, SIGKILL what lingers.

    The descendants are looked up first because they need not be in the group: a Prefect process
    worker starts each flow run in a session of its own, and the distill flow starts `dvc exp run`
    in another; stopping only the worker's group left them training on.
    """
    if proc.poll() is not None:
        return
    try:
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        family = []
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    for member in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.terminate()
    _, lingering = psutil.wait_procs(family, timeout=STOP_TIMEOUT_S)
    for member in lingering:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.kill()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    psutil.wait_procs(lingering, timeout=STOP_TIMEOUT_S)
    proc.wait(timeout=STOP_TIMEOUT_S)


def visible_gpus() -> list[str]:
    """The GPUs this process may use: ``CUDA_VISIBLE_DEVICES`` when set (ids or UUIDs), else every GPU that
    ``nvidia-smi`` lists (none without it)."""
    chosen = os.environ.get("CUDA_VISIBLE_DEVICES")
    if chosen is not None:
        return [gpu.strip() for gpu in chosen.split(",") if gpu.strip()]
    try:
        listed = subprocess.run(
            ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return []
    return [line.strip() for line in listed.stdout.splitlines() if line.strip()]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _interrupt(signum: int, frame: object) -> None:
    _ignore_interrupts()  # the first one starts the stop; a second must not cut it short
    raise KeyboardInterrupt


def _ignore_interrupts() -> None:
    """From here on only the stop runs: a second Ctrl-C or kill would cut it short and leave the server,
    the workers and their flow runs (each in its own session) running, with the port taken."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)


def _serve_until_interrupted(servers: list[subprocess.Popen[bytes] | None], stop: list[Callable[[], None]]) -> int:
    """Wait while every server runs; Ctrl-C or a plain `kill` (see main) end in the orderly stop."""
    try:
        while all(server is not None and server.poll() is None for server in servers):
            time.sleep(1)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        _ignore_interrupts()
        for stop_one in stop:
            stop_one()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    prefect = commands.add_parser("prefect", help="Prefect server + UI, pools, deployments, a cpu worker")
    prefect.add_argument("--port", type=int, default=4200)
    prefect.add_argument("--home", type=Path, default=PROJECT_ROOT / ".prefect", help="PREFECT_HOME")
    gpu = prefect.add_mutually_exclusive_group()
    gpu.add_argument(
        "--gpu-worker", action="store_true", help="also a gpu-pool worker for every visible GPU (one run at a time)"
    )
    gpu.add_argument(
        "--gpu-worker-per-gpu",
        action="store_true",
        help="also one gpu-pool worker per visible GPU, each seeing only its GPU (one run at a time each)",
    )
    prefect.add_argument("--no-worker", action="store_true", help="server, pools and deployments only")
    mlflow = commands.add_parser("mlflow", help="the MLflow UI over the project's tracking store")
    mlflow.add_argument("--port", type=int, default=5000)
    args = parser.parse_args(argv)
    # Ctrl-C or a plain `kill` both end in the orderly stop (a background shell job starts with
    # SIGINT ignored, so install the handler explicitly), also while the servers start.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _interrupt)

    if args.command == "mlflow":
        ui = MlflowUi(PROJECT_ROOT, args.port)
        try:
            ui.start()
        except BaseException:
            _ignore_interrupts()
            ui.stop()
            raise
        print(f"MLflow UI: {ui.url}  (store {ui.store()}). Ctrl-C stops it.", flush=True)
        return _serve_until_interrupted([ui.server], [ui.stop])

    home = args.home.resolve()
    stack = LocalStack(home=home, port=args.port, log_dir=home / "logs")
    try:
        stack.start_server()
        stack.create_pools()
        stack.deploy()
        gpu_workers: list[str] = []
        if not args.no_worker:
            stack.start_worker("cpu")
            if args.gpu_worker or args.gpu_worker_per_gpu:
                gpu_workers = stack.start_gpu_workers(per_gpu=args.gpu_worker_per_gpu)
    except BaseException:
        _ignore_interrupts()
        stack.stop()
        raise
    print(f"Prefect UI: {stack.ui_url}  (API {stack.api_url}; logs in {stack.log_dir})")
    if gpu_workers:
        print(f"gpu workers (one run at a time each), CUDA_VISIBLE_DEVICES: {' | '.join(gpu_workers)}")
    print("Deployments: distill/cpu, distill/gpu, sweep/cpu. Ctrl-C stops everything.", flush=True)
    return _serve_until_interrupted([stack.server], [stack.stop])


if __name__ == "__main__":
    sys.exit(main())
