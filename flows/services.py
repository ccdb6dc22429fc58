"""The services that hosts share in place of a disk (docs/multi-host.md), and a worker's checkout of the project.

    python flows/services.py up --host 10.0.0.5             # every service on 10.0.0.5, Ctrl-C stops them
    python flows/services.py checkout                        # a pull step: DVC remote of the env, dvc pull

``up`` (``scripts/services_up.sh``) starts on one routable address:

* the Prefect server (API and UI), with a ``remote`` work pool;
* an MLflow tracking server over a database (``mlflow.db``, sqlite) that stores the models itself
  (``--artifacts-destination``, ``--serve-artifacts``): workers send models through it and need no
  shared folder;
* a WebDAV server (wsgidav) holding the DVC remote: data, teacher vectors, models;
* ``git daemon`` serving the project's git remote (``<name>.git``; pushes allowed), seeded from a checkout.

Its state lives in one folder (``--dir``, default ``<project>/.services``), and it writes the hosts' env file
there (``multi-host.env``: PREFECT_API_URL, MLFLOW_TRACKING_URI, XDISTILL_GIT_REMOTE, XDISTILL_DVC_REMOTE,
XDISTILL_EXP_REMOTE). A host that sources it talks to these services only. None of the services
authenticates anyone: run them on a network only the team's hosts reach (or behind a proxy that does).

``checkout`` runs in a fresh clone of the git remote (the ``distill/remote`` deployment's pull steps):
it sets the DVC remote from ``XDISTILL_DVC_REMOTE``, a host-wide DVC cache from ``XDISTILL_DVC_CACHE``
when set (so a host downloads each file once), and ``dvc pull``s what the clone's dvc.lock names.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: `flows` importable

from flows.local_stack import (  # noqa: E402
    DATABASE_TIMEOUT_S,
    STARTUP_TIMEOUT_S,
    _ignore_interrupts,
    _interrupt,
    _serve_until_interrupted,
    _start,
    stop_group,
    wait_until_up,
)

PROJECT_ROOT = Path(__file__).resolve().parent.parent
REMOTE_POOL = "remote"
DVC_SHARE = "dvc"  # the DVC remote's folder on the WebDAV server
DEFAULT_PORTS = {"prefect": 4200, "mlflow": 5000, "webdav": 8080, "git": 9418}
ENV_FILE = "multi-host.env"
DVC_REMOTE_NAME = "services"  # what `checkout` calls the DVC remote in a clone's .dvc/config.local


@dataclass
class Services:
    """The shared services of the hosts, on ``host``; state under ``state``."""

    host: str
    state: Path
    ports: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_PORTS))
    repo_name: str = "xdistill"
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def log_dir(self) -> Path:
        return self.state / "logs"

    def url(self, service: str) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        scheme = {"git": "git", "webdav": "webdav"}.get(service, "http")
        return f"{scheme}://{host}:{self.ports[service]}"

    @property
    def prefect_api(self) -> str:
        return f"{self.url('prefect')}/api"

    @property
    def git_remote(self) -> str:
        return f"{self.url('git')}/{self.repo_name}.git"

    @property
    def dvc_remote(self) -> str:
        return f"{self.url('webdav')}/{DVC_SHARE}"

    def client_env(self) -> dict[str, str]:
        """What every host exports to use the services (the env file's lines)."""
        return {
            "PREFECT_API_URL": self.prefect_api,
            "MLFLOW_TRACKING_URI": self.url("mlflow"),
            "XDISTILL_GIT_REMOTE": self.git_remote,
            "XDISTILL_DVC_REMOTE": self.dvc_remote,
            # the distill flow pushes each experiment, with its DVC data, to its checkout's origin (the git remote)
            "XDISTILL_EXP_REMOTE": "origin",
        }

    def write_env_file(self) -> Path:
        path = self.state / ENV_FILE
        lines = [f"export {name}={value}" for name, value in self.client_env().items()]
        path.write_text("# source this file on every host (docs/multi-host.md)\n" + "\n".join(lines) + "\n")
        return path

    # --- starting ----------------------------------------------------------------------------------

    def start(self, seed: Path | None) -> None:
        """Every service, each answering before the next starts; the git remote seeded from ``seed``."""
        for service, port in self.ports.items():
            require_free(self.host, port, service)
        self.state.mkdir(parents=True, exist_ok=True)
        self.start_git(seed)
        self.start_webdav()
        self.start_mlflow()
        self.start_prefect()

    def start_prefect(self) -> None:
        from xdistill.env import child_env

        home = self.state / "prefect"
        home.mkdir(exist_ok=True)
        env = child_env(
            PREFECT_HOME=str(home),
            PREFECT_API_URL=self.prefect_api,
            PREFECT_SERVER_DATABASE_TIMEOUT=DATABASE_TIMEOUT_S,
            PREFECT_UI_API_URL=self.prefect_api,
        )
        cmd = [sys.executable, "-m", "prefect", "server", "start", "--host", self.host]
        self._run("prefect", [*cmd, "--port", str(self.ports["prefect"])], env, f"{self.prefect_api}/health")
        subprocess.run(
            [sys.executable, "-m", "prefect", "work-pool", "create", REMOTE_POOL, "--type", "process", "--overwrite"],
            env=env,
            check=True,
            capture_output=True,
        )

    def start_mlflow(self) -> None:
        from xdistill.env import child_env

        folder = self.state / "mlflow"
        (folder / "artifacts").mkdir(parents=True, exist_ok=True)
        database = f"sqlite:///{folder / 'mlflow.db'}"
        port = self.ports["mlflow"]
        cmd = [
            *(sys.executable, "-m", "mlflow", "server"),
            *("--backend-store-uri", database, "--registry-store-uri", database),
            # models and plots go through the server into this folder: clients get mlflow-artifacts:/ URIs
            *("--artifacts-destination", str(folder / "artifacts"), "--serve-artifacts"),
            *("--host", self.host, "--port", str(port), "--workers", "1"),
            # the Host header clients send: this address (MLflow's default allows only local and private IPs)
            *("--allowed-hosts", f"{self.host},{self.host}:{port},localhost,localhost:*,127.0.0.1,127.0.0.1:*"),
        ]
        # without it, stopping the server leaves job-runner processes behind
        env = child_env(MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
        self._run("mlflow", cmd, env, f"{self.url('mlflow')}/health", cwd=folder)

    def start_webdav(self) -> None:
        from xdistill.env import child_env

        root = self.state / "webdav"
        (root / DVC_SHARE).mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "wsgidav.server.server_cli", "--host", self.host]
        cmd += ["--port", str(self.ports["webdav"]), "--root", str(root), "--auth", "anonymous", "--no-config", "-q"]
        http = self.url("webdav").replace("webdav://", "http://", 1)
        self._run("webdav", cmd, child_env(), f"{http}/{DVC_SHARE}/")

    def start_git(self, seed: Path | None) -> None:
        base = self.state / "git"
        repo = base / f"{self.repo_name}.git"
        if not repo.exists():
            _git(["init", "--quiet", "--bare", str(repo)], base.parent)
            if seed is not None:
                seed_git_remote(repo, seed)
        cmd = ["git", "daemon", "--reuseaddr", f"--base-path={base}", "--export-all", "--enable=receive-pack"]
        cmd += [f"--listen={self.host}", f"--port={self.ports['git']}", str(base)]
        self.procs["git"] = _start(cmd, dict(os.environ), self.log_dir, "git")
        wait_for_port(self.procs["git"], self.host, self.ports["git"], "git daemon", self.log_dir)

    def _run(self, name: str, cmd: list[str], env: dict[str, str], health: str, cwd: Path | None = None) -> None:
        self.procs[name] = _start(cmd, env, self.log_dir, name, cwd=cwd)
        wait_until_up(self.procs[name], health, name, self.log_dir)

    def stop(self) -> None:
        """Every service, in the reverse order of their start."""
        for name in reversed(list(self.procs)):
            stop_group(self.procs.pop(name))


def seed_git_remote(repo: Path, seed: Path) -> None:
    """Push every branch and tag of checkout ``seed`` into the new bare ``repo``; its HEAD is ``seed``'s branch."""
    _git(["push", "--quiet", str(repo), "refs/heads/*:refs/heads/*", "refs/tags/*:refs/tags/*"], seed)
    branch = _git(["symbolic-ref", "--quiet", "HEAD"], seed)
    _git(["symbolic-ref", "HEAD", branch], repo)


def _git(args: list[str], cwd: Path) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} (in {cwd}) failed: {(proc.stderr or proc.stdout).strip()}")
    return proc.stdout.strip()


def require_free(host: str, port: int, what: str) -> None:
    """Refuse a port something on ``host`` already listens on (it would answer in place of the new service)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise RuntimeError(
                f"{what}: cannot listen on {host}:{port} ({exc.strerror}); choose another port"
            ) from None


def wait_for_port(proc: subprocess.Popen[bytes], host: str, port: int, what: str, log_dir: Path) -> None:
    """Return once ``host:port`` accepts connections; raise when ``proc`` exits or the start times out."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} (see {log_dir})")
        try:
            with socket.create_connection((host, port), timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"{what} did not listen on {host}:{port} within {STARTUP_TIMEOUT_S:.0f} s")


# --- a worker's checkout (the distill/remote deployment's pull step) ----------------------------------


def checkout(clone: Path) -> None:
    """Point the clone at the DVC remote of ``XDISTILL_DVC_REMOTE`` (and the host's DVC cache of
    ``XDISTILL_DVC_CACHE``, when set), then ``dvc pull`` what its dvc.lock names; outputs no remote holds
    yet are left to the run (DVC's run cache or the stage itself)."""
    from xdistill.env import child_env

    remote = os.environ.get("XDISTILL_DVC_REMOTE", "").strip()
    if not remote:
        raise SystemExit("error: XDISTILL_DVC_REMOTE is not set: source the services' env file (docs/multi-host.md)")
    dvc = [sys.executable, "-m", "dvc"]
    steps = [[*dvc, "remote", "add", "--local", "--force", "--default", DVC_REMOTE_NAME, remote]]
    if cache := os.environ.get("XDISTILL_DVC_CACHE", "").strip():
        steps.append([*dvc, "cache", "dir", "--local", str(Path(cache).expanduser().resolve())])
    steps.append([*dvc, "pull", "--allow-missing"])
    for step in steps:
        proc = subprocess.run(step, cwd=clone, env=child_env(), capture_output=True, text=True, check=False)
        print(proc.stdout, end="", flush=True)
        if proc.returncode != 0:
            raise SystemExit(f"error: {' '.join(step[2:])} failed in {clone}: {(proc.stderr or proc.stdout).strip()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start the shared services; Ctrl-C stops them")
    up.add_argument("--host", default="127.0.0.1", help="the address every host reaches the services at")
    up.add_argument("--dir", type=Path, default=PROJECT_ROOT / ".services", help="the services' state folder")
    for service, port in DEFAULT_PORTS.items():
        up.add_argument(f"--{service}-port", type=int, default=port)
    up.add_argument("--repo-name", default="xdistill", help="the git remote's name: git://HOST:PORT/<name>.git")
    up.add_argument(
        "--seed", type=Path, default=PROJECT_ROOT, help="checkout whose branches fill a new git remote (default: this)"
    )
    check = commands.add_parser("checkout", help="a worker's clone: DVC remote and cache from the env, dvc pull")
    check.add_argument("clone", type=Path, nargs="?", default=Path.cwd())
    args = parser.parse_args(argv)
    if args.command == "checkout":
        checkout(args.clone)
        return 0

    for signum in (signal.SIGINT, signal.SIGTERM):  # Ctrl-C or `kill`: the orderly stop (flows/local_stack.py)
        signal.signal(signum, _interrupt)
    ports = {service: getattr(args, f"{service}_port") for service in DEFAULT_PORTS}
    services = Services(args.host, args.dir.resolve(), ports, args.repo_name)
    try:
        services.start(args.seed.resolve())
        env_file = services.write_env_file()
    except BaseException:
        _ignore_interrupts()
        services.stop()
        raise
    print(f"Services on {args.host} (state {services.state}, logs {services.log_dir}):")
    for name, value in services.client_env().items():
        print(f"  {name}={value}")
    print(f"On every host: source {env_file}  (a copy of it). Ctrl-C stops the services.", flush=True)
    return _serve_until_interrupted(list(services.procs.values()), [services.stop])


if __name__ == "__main__":
    sys.exit(main())
