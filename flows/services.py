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
XDISTILL_EXP_REMOTE and the credentials). A host that sources it talks to these services only.

Authentication (:class:`Credentials`, kept in ``secrets.env`` of the state folder, mode 0600, made on the first
start from the variables below where they are set, else generated; the env file is 0600 too):

* MLflow runs its ``basic-auth`` app (auth database ``mlflow/basic_auth.db``); the admin account it creates on
  its first start is the one clients use: ``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD``;
* the Prefect server requires ``PREFECT_SERVER_API_AUTH_STRING`` (``user:password``); clients send
  ``PREFECT_API_AUTH_STRING``;
* WebDAV requires ``XDISTILL_DVC_USER`` / ``XDISTILL_DVC_PASSWORD`` (basic auth); ``checkout`` writes them to the
  clone's ``.dvc/config.local``, as ``dvc remote modify --local services user|password`` would;
* ``git daemon`` cannot authenticate: it serves only a loopback address. On any other address no git daemon
  starts and ``XDISTILL_GIT_REMOTE`` is the bare repository over SSH (``ssh://HOST/<dir>/git/<name>.git``;
  ``ssh://HOST:PORT/...`` with ``--ssh-port``): the hosts' SSH accounts are its authentication.

``up --no-auth`` starts the services without credentials, on a loopback address only: a service listening
beyond 127.0.0.1 without credentials is refused. Basic auth sends the credentials in clear text: between hosts,
keep the services on a network only the team reaches, or behind a TLS proxy.

``checkout`` runs in a fresh clone of the git remote (the ``distill/remote`` deployment's pull steps):
it sets the DVC remote from ``XDISTILL_DVC_REMOTE``, a host-wide DVC cache from ``XDISTILL_DVC_CACHE``
when set (so a host downloads each file once), and ``dvc pull``s what the clone's dvc.lock names.
"""

from __future__ import annotations

import argparse
import base64
import ipaddress
import os
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import yaml

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
# The ssh of every host towards the git remote: the services host's key must be in known_hosts, no prompt.
# Set, GIT_SSH_COMMAND also makes DVC's git client (scmrepo's dulwich) run OpenSSH (its `core.sshCommand`, or
# plain `ssh`), which checks that key; unset, `dvc exp push`/`pull` log in over asyncssh without checking it.
CHECKED_SSH = "ssh -o BatchMode=yes -o StrictHostKeyChecking=yes"
SECRETS_FILE = "secrets.env"
DVC_REMOTE_NAME = "services"  # what `checkout` calls the DVC remote in a clone's .dvc/config.local
DVC_USER_ENV, DVC_PASSWORD_ENV = "XDISTILL_DVC_USER", "XDISTILL_DVC_PASSWORD"
USER = "xdistill"  # the account name when none is given


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (mode 0600, also when the file was there)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)


def _read_env_lines(path: Path) -> dict[str, str]:
    """``NAME=value`` lines (``export`` and shell quoting allowed) of an env file."""
    values = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        words = shlex.split(line, comments=True)
        if words and words[0] == "export":
            words = words[1:]
        if len(words) == 1 and "=" in words[0]:
            name, value = words[0].split("=", 1)
            values[name] = value
    return values


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: whatever it resolves to, other hosts may reach it


@dataclass(frozen=True)
class Credentials:
    """The services' accounts: MLflow's admin (what the clients log in as), Prefect's auth string, the WebDAV
    user; ``flask_secret`` signs the MLflow auth app's forms (the server's only, never a client's)."""

    mlflow_user: str
    mlflow_password: str
    prefect_auth: str
    dvc_user: str
    dvc_password: str
    flask_secret: str

    # the variable each field is read from (on the first start) and written to (the files)
    ENV: ClassVar[dict[str, str]] = {
        "mlflow_user": "MLFLOW_TRACKING_USERNAME",
        "mlflow_password": "MLFLOW_TRACKING_PASSWORD",
        "prefect_auth": "PREFECT_API_AUTH_STRING",
        "dvc_user": DVC_USER_ENV,
        "dvc_password": DVC_PASSWORD_ENV,
        "flask_secret": "MLFLOW_FLASK_SERVER_SECRET_KEY",
    }

    @classmethod
    def generate(cls, environ: dict[str, str] | None = None) -> Credentials:
        """The values of the variables in ``environ`` (default: this process's) where set, else new secrets."""
        env = os.environ if environ is None else environ
        token = lambda: secrets.token_urlsafe(24)  # noqa: E731  (a fresh one each call)
        defaults = {
            "mlflow_user": USER,
            "mlflow_password": token(),
            "prefect_auth": f"{USER}:{token()}",
            "dvc_user": USER,
            "dvc_password": token(),
            "flask_secret": token(),
        }
        values = {key: env.get(name) or defaults[key] for key, name in cls.ENV.items()}
        credentials = cls(**values)
        credentials.check()
        return credentials

    def check(self) -> None:
        """Refuse values a service would refuse later, naming the variable."""
        if len(self.mlflow_password) < 12:  # MLflow's own rule for a password
            raise ValueError(f"{self.ENV['mlflow_password']}: MLflow needs a password of at least 12 characters")
        if len(self.mlflow_user) < 4:
            raise ValueError(f"{self.ENV['mlflow_user']}: MLflow needs a user name of at least 4 characters")
        user, _, password = self.prefect_auth.partition(":")
        if not user or not password:
            raise ValueError(f"{self.ENV['prefect_auth']}: Prefect's auth string is 'user:password'")
        if not self.dvc_user or not self.dvc_password:
            raise ValueError(f"{DVC_USER_ENV} and {DVC_PASSWORD_ENV}: the WebDAV account needs both")

    @classmethod
    def load_or_create(cls, path: Path) -> Credentials:
        """The credentials kept in ``path`` (0600); made on the first start (:meth:`generate`). A variable set
        now that differs from the kept value is refused: MLflow's admin password is fixed at its first start."""
        if not path.exists():
            credentials = cls.generate()
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_private(path, credentials.env_text(server=True, comment="the services' credentials"))
            return credentials
        mode = path.stat().st_mode & 0o777
        if mode & 0o077:
            raise PermissionError(f"{path} is readable by others (mode {mode:o}): chmod 600 {path}")
        kept = _read_env_lines(path)
        missing = [name for name in cls.ENV.values() if not kept.get(name)]
        if missing:
            raise ValueError(f"{path} lacks {', '.join(missing)}: restore it, or remove the services' state folder")
        for name in cls.ENV.values():
            if os.environ.get(name) and os.environ[name] != kept[name]:
                raise ValueError(
                    f"{name} is set to another value than the one the services were started with ({path}): "
                    "unset it (MLflow's admin password cannot change by a restart; see docs/multi-host.md)"
                )
        return cls(**{key: kept[name] for key, name in cls.ENV.items()})

    def client_env(self) -> dict[str, str]:
        """What a client of the services exports (the server's Flask secret left out)."""
        return {name: getattr(self, key) for key, name in self.ENV.items() if key != "flask_secret"}

    def env_text(self, server: bool = False, comment: str = "") -> str:
        env = {name: getattr(self, key) for key, name in self.ENV.items()} if server else self.client_env()
        lines = [f"export {name}={shlex.quote(value)}" for name, value in env.items()]
        return (f"# {comment}\n" if comment else "") + "\n".join(lines) + "\n"


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def _wait_until_answers(
    proc: subprocess.Popen[bytes], url: str, what: str, log_dir: Path, headers: dict[str, str]
) -> None:
    """Return once ``url`` answers 200 to a request with ``headers``; raise when ``proc`` exits or the start
    times out (:func:`flows.local_stack.wait_until_up`, with credentials)."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} (see {log_dir})")
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as response:
                if response.status == 200 and proc.poll() is None:
                    return
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"{what} answered {exc.code} to its own credentials on {url} (see {log_dir})") from None
        except OSError:
            time.sleep(1)
    raise RuntimeError(f"{what} did not answer on {url} within {STARTUP_TIMEOUT_S:.0f} s")


@dataclass
class Services:
    """The shared services of the hosts, on ``host``; state under ``state``."""

    host: str
    state: Path
    ports: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_PORTS))
    repo_name: str = "xdistill"
    # None: no authentication, which only a loopback host may run without (require_auth)
    credentials: Credentials | None = None
    # the services host's SSH port in the git remote's URL beyond the loopback address; None: ssh's own (22, or
    # what the hosts' ~/.ssh/config says)
    ssh_port: int | None = None
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
    def git_repo(self) -> Path:
        return self.state / "git" / f"{self.repo_name}.git"

    @property
    def git_daemon(self) -> bool:
        """Whether ``git daemon`` serves the git remote: it authenticates nobody, so on a loopback host only."""
        return is_loopback(self.host)

    @property
    def git_remote(self) -> str:
        if not self.git_daemon:  # the bare repository over SSH: the hosts' SSH accounts authenticate
            return ssh_git_remote(self.host, self.git_repo, self.ssh_port)
        return f"{self.url('git')}/{self.repo_name}.git"

    def require_auth(self, service: str) -> None:
        """Refuse to start ``service`` beyond the loopback address without credentials."""
        if self.credentials is None and not is_loopback(self.host):
            raise RuntimeError(
                f"{service}: refusing to listen on {self.host} without authentication: anyone who reaches that "
                "address could run flows, replace models and data. Start the services with credentials (the "
                "default of `services_up.sh`; --no-auth is for 127.0.0.1 only), see docs/multi-host.md"
            )

    @property
    def dvc_remote(self) -> str:
        return f"{self.url('webdav')}/{DVC_SHARE}"

    def client_env(self) -> dict[str, str]:
        """What every host exports to use the services (the env file's lines), credentials included."""
        return {
            "PREFECT_API_URL": self.prefect_api,
            "MLFLOW_TRACKING_URI": self.url("mlflow"),
            "XDISTILL_GIT_REMOTE": self.git_remote,
            "XDISTILL_DVC_REMOTE": self.dvc_remote,
            # the distill flow pushes each experiment, with its DVC data, to its checkout's origin (the git remote)
            "XDISTILL_EXP_REMOTE": "origin",
            **({} if self.git_daemon else {"GIT_SSH_COMMAND": CHECKED_SSH}),
            **(self.credentials.client_env() if self.credentials else {}),
        }

    def write_env_file(self) -> Path:
        """``<state>/multi-host.env``, readable by its owner only (it holds the credentials)."""
        path = self.state / ENV_FILE
        lines = [f"export {name}={shlex.quote(value)}" for name, value in self.client_env().items()]
        _write_private(path, "# source this file on every host (docs/multi-host.md)\n" + "\n".join(lines) + "\n")
        return path

    # --- starting ----------------------------------------------------------------------------------

    def start(self, seed: Path | None) -> None:
        """Every service, each answering before the next starts; the git remote seeded from ``seed``."""
        self.require_auth("services")
        for service, port in self.ports.items():
            if service != "git" or self.git_daemon:
                require_free(self.host, port, service)
        self.state.mkdir(parents=True, exist_ok=True)
        self.start_git(seed)
        self.start_webdav()
        self.start_mlflow()
        self.start_prefect()

    def start_prefect(self) -> None:
        from xdistill.env import child_env

        self.require_auth("prefect")
        home = self.state / "prefect"
        home.mkdir(parents=True, exist_ok=True)
        # the server requires the auth string on every API call (its health check aside); its CLI sends it
        auth = self.credentials.prefect_auth if self.credentials else ""
        env = child_env(
            PREFECT_HOME=str(home),
            PREFECT_API_URL=self.prefect_api,
            PREFECT_SERVER_DATABASE_TIMEOUT=DATABASE_TIMEOUT_S,
            PREFECT_UI_API_URL=self.prefect_api,
            PREFECT_SERVER_API_AUTH_STRING=auth,
            PREFECT_API_AUTH_STRING=auth,
        )
        if not auth:  # none inherited from the caller's environment either: a server without authentication
            del env["PREFECT_SERVER_API_AUTH_STRING"], env["PREFECT_API_AUTH_STRING"]
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

        self.require_auth("mlflow")
        folder = self.state / "mlflow"
        (folder / "artifacts").mkdir(parents=True, exist_ok=True)
        database = f"sqlite:///{folder / 'mlflow.db'}"
        port = self.ports["mlflow"]
        auth_env, auth_app = self._mlflow_auth(folder)
        cmd = [
            *(sys.executable, "-m", "mlflow", "server", *auth_app),
            *("--backend-store-uri", database, "--registry-store-uri", database),
            # models and plots go through the server into this folder: clients get mlflow-artifacts:/ URIs
            *("--artifacts-destination", str(folder / "artifacts"), "--serve-artifacts"),
            *("--host", self.host, "--port", str(port), "--workers", "1"),
            # the Host header clients send: this address (MLflow's default allows only local and private IPs)
            *("--allowed-hosts", f"{self.host},{self.host}:{port},localhost,localhost:*,127.0.0.1,127.0.0.1:*"),
        ]
        # without it, stopping the server leaves job-runner processes behind
        env = child_env(MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false", **auth_env)
        self._run("mlflow", cmd, env, f"{self.url('mlflow')}/health", cwd=folder)

    def _mlflow_auth(self, folder: Path) -> tuple[dict[str, str], list[str]]:
        """The environment and options of MLflow's basic-auth app: its config file (auth database in ``folder``)
        and the admin account it creates on its first start."""
        if self.credentials is None:
            return {}, []
        database = folder / "basic_auth.db"
        config = folder / "basic_auth.ini"
        _write_private(
            config,
            "[mlflow]\ndefault_permission = READ\n"
            f"database_uri = sqlite:///{database}\n"
            "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n",
        )
        env = {
            "MLFLOW_AUTH_CONFIG_PATH": str(config),
            "MLFLOW_AUTH_ADMIN_USERNAME": self.credentials.mlflow_user,
            "MLFLOW_AUTH_ADMIN_PASSWORD": self.credentials.mlflow_password,
            "MLFLOW_FLASK_SERVER_SECRET_KEY": self.credentials.flask_secret,
        }
        return env, ["--app-name", "basic-auth"]

    def start_webdav(self) -> None:
        from xdistill.env import child_env

        self.require_auth("webdav")
        root = self.state / "webdav"
        (root / DVC_SHARE).mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "wsgidav.server.server_cli", "--host", self.host]
        cmd += ["--port", str(self.ports["webdav"]), "--root", str(root), "-q"]
        http = self.url("webdav").replace("webdav://", "http://", 1)
        if self.credentials is None:
            self._run("webdav", [*cmd, "--auth", "anonymous", "--no-config"], child_env(), f"{http}/{DVC_SHARE}/")
            return
        # basic auth (what DVC's webdav remote sends) for one user; the file lies outside the shared folder
        config = self.state / "wsgidav.yaml"
        user, password = self.credentials.dvc_user, self.credentials.dvc_password
        settings = {
            "http_authenticator": {"accept_basic": True, "accept_digest": False, "default_to_digest": False},
            "simple_dc": {"user_mapping": {"*": {user: {"password": password}}}},
        }
        _write_private(config, yaml.safe_dump(settings))
        self.procs["webdav"] = _start([*cmd, "--config", str(config)], child_env(), self.log_dir, "webdav")
        _wait_until_answers(
            self.procs["webdav"], f"{http}/{DVC_SHARE}/", "webdav", self.log_dir, _basic(user, password)
        )

    def start_git(self, seed: Path | None) -> None:
        """The bare git remote, seeded from ``seed``; served by ``git daemon`` on a loopback host only (over SSH
        otherwise: :attr:`git_remote`)."""
        repo = self.git_repo
        base = repo.parent
        if not repo.exists():
            base.mkdir(parents=True, exist_ok=True)
            _git(["init", "--quiet", "--bare", str(repo)], base.parent)
            if seed is not None:
                seed_git_remote(repo, seed)
        if not self.git_daemon:
            return
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


def ssh_git_remote(host: str, repo: Path, port: int | None = None) -> str:
    """The bare repository ``repo`` on ``host`` over SSH: ``ssh://HOST[:PORT]/<path>``; ``port`` None: ssh's own
    (22, or the hosts' ~/.ssh/config). git sends ``git-upload-pack '<path>'`` / ``git-receive-pack '<path>'``."""
    host = f"[{host}]" if ":" in host else host
    return f"ssh://{host}{f':{port}' if port else ''}{repo}"


def services_credentials(state: Path) -> Credentials:
    """The credentials of the services whose state is ``state`` (:meth:`Credentials.load_or_create`); refused
    when they are lost but MLflow's auth database holds an admin of the old ones."""
    secrets_file = state / SECRETS_FILE
    auth_db = state / "mlflow" / "basic_auth.db"
    if not secrets_file.exists() and auth_db.exists():
        raise ValueError(
            f"{secrets_file} is gone but {auth_db} holds the MLflow admin it made: restore the file, or delete "
            f"{auth_db} to start MLflow's accounts afresh"
        )
    return Credentials.load_or_create(secrets_file)


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
    remote = os.environ.get("XDISTILL_DVC_REMOTE", "").strip()
    if not remote:
        raise SystemExit("error: XDISTILL_DVC_REMOTE is not set: source the services' env file (docs/multi-host.md)")
    dvc = [sys.executable, "-m", "dvc"]
    _dvc_step([*dvc, "remote", "add", "--local", "--force", "--default", DVC_REMOTE_NAME, remote], clone)
    set_dvc_credentials(clone)
    if cache := os.environ.get("XDISTILL_DVC_CACHE", "").strip():
        _dvc_step([*dvc, "cache", "dir", "--local", str(Path(cache).expanduser().resolve())], clone)
    _dvc_step([*dvc, "pull", "--allow-missing"], clone)


def _dvc_step(step: list[str], clone: Path) -> None:
    from xdistill.env import child_env

    proc = subprocess.run(step, cwd=clone, env=child_env(), capture_output=True, text=True, check=False)
    print(proc.stdout, end="", flush=True)
    if proc.returncode != 0:
        raise SystemExit(f"error: {' '.join(step[2:])} failed in {clone}: {(proc.stderr or proc.stdout).strip()}")


def set_dvc_credentials(clone: Path, remote: str = DVC_REMOTE_NAME) -> None:
    """The WebDAV account of ``XDISTILL_DVC_USER`` / ``XDISTILL_DVC_PASSWORD`` into the clone's .dvc/config.local
    (what ``dvc remote modify --local <remote> user|password`` writes), kept out of any command line."""
    user, password = os.environ.get(DVC_USER_ENV, ""), os.environ.get(DVC_PASSWORD_ENV, "")
    if not user and not password:
        return
    if not user or not password:
        raise SystemExit(f"error: set both {DVC_USER_ENV} and {DVC_PASSWORD_ENV} (the services' env file has them)")
    from dvc.config import Config

    with Config(dvc_dir=str(clone / ".dvc")).edit("local") as config:
        config["remote"][remote].update(user=user, password=password)
    os.chmod(clone / ".dvc" / "config.local", 0o600)


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
        "--ssh-port",
        type=int,
        help="beyond 127.0.0.1: the services host's SSH port in the git remote's URL (default 22)",
    )
    up.add_argument(
        "--seed", type=Path, default=PROJECT_ROOT, help="checkout whose branches fill a new git remote (default: this)"
    )
    up.add_argument(
        "--no-auth",
        action="store_true",
        help="no credentials (a loopback --host only); default: the ones in <dir>/secrets.env, made on the first start",
    )
    check = commands.add_parser("checkout", help="a worker's clone: DVC remote and cache from the env, dvc pull")
    check.add_argument("clone", type=Path, nargs="?", default=Path.cwd())
    args = parser.parse_args(argv)
    if args.command == "checkout":
        checkout(args.clone)
        return 0

    ports = {service: getattr(args, f"{service}_port") for service in DEFAULT_PORTS}
    state = args.dir.resolve()
    try:
        if args.no_auth and not is_loopback(args.host):
            raise RuntimeError(
                f"--no-auth refused: services on {args.host} are reachable beyond this machine and must "
                "authenticate (--no-auth is for a loopback --host only, e.g. 127.0.0.1)"
            )
        credentials = None if args.no_auth else services_credentials(state)
    except (OSError, ValueError, RuntimeError) as exc:
        raise SystemExit(f"error: {exc}") from None
    services = Services(args.host, state, ports, args.repo_name, credentials, args.ssh_port)
    for signum in (signal.SIGINT, signal.SIGTERM):  # Ctrl-C or `kill`: the orderly stop (flows/local_stack.py)
        signal.signal(signum, _interrupt)
    try:
        services.start(args.seed.resolve())
        env_file = services.write_env_file()
    except BaseException:
        _ignore_interrupts()
        services.stop()
        raise
    print(f"Services on {args.host} (state {services.state}, logs {services.log_dir}):")
    for name, value in services.client_env().items():
        if not credentials or name not in credentials.client_env():  # never a secret on the terminal
            print(f"  {name}={value}")
    if credentials:
        print(f"  credentials: {', '.join(credentials.client_env())} (in the env file; kept in {SECRETS_FILE})")
    print(f"On every host: source {env_file}  (a copy of it, mode 600). Ctrl-C stops the services.", flush=True)
    return _serve_until_interrupted(list(services.procs.values()), [services.stop])


if __name__ == "__main__":
    sys.exit(main())
