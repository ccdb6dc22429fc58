"""The multi-host git remote over SSH (docs/multi-host.md): beyond the loopback address no git daemon runs and
the hosts reach the bare repository of the services (:meth:`flows.services.Services.start_git`) at
``ssh://HOST[:PORT]/<dir>/git/<name>.git`` (:func:`flows.services.ssh_git_remote`), authenticated by SSH keys.

A real SSH server (asyncssh, :mod:`testbed.ssh_git`) on 127.0.0.1 stands in for the services host's sshd: public
keys only, and only git's pack commands for repositories in the services' git folder. Each "host" is a folder
with its own HOME holding its key (``~/.ssh/id_ed25519``, mode 600) and the server's host key
(``~/.ssh/known_hosts``). git runs OpenSSH, which reads ``~`` from the password database, not ``HOME``: the
host's ``~/.gitconfig`` names both files in ``core.sshCommand``. ``dvc exp push`` / ``pull`` reach the remote
through DVC's own git client (scmrepo's dulwich), which logs in over asyncssh without checking the server's key
unless ``GIT_SSH_COMMAND`` is set; set (as the multi-host env file sets it), it runs OpenSSH with
``core.sshCommand``, which checks the key: a host that knows another key for the server is refused.

Seconds on 2 cores: git over SSH takes ~0.1 s a command, each DVC command ~1 s.
"""

from __future__ import annotations

import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from flows.local_stack import free_port
from flows.services import Services, ssh_git_remote
from testbed.pipeline_project import init_git_dvc, run
from testbed.ssh_git import GitSshServer, generate_key
from xdistill.env import child_env

DVC = [sys.executable, "-m", "dvc"]
REMOTE_HOST = "10.0.0.5"  # an address beyond the loopback one: the services make no git daemon, only the repository
# what would change how git or ssh reach the remote, from the environment of whoever runs the tests
UNSET = ("GIT_SSH", "GIT_SSH_COMMAND", "GIT_SSH_VARIANT", "SSH_AUTH_SOCK", "GIT_DIR", "GIT_WORK_TREE")


def _host(folder: Path) -> Path:
    """A host's HOME with its own SSH key and git identity; returns the private key."""
    ssh = folder / "home" / ".ssh"
    ssh.mkdir(parents=True, mode=0o700)
    return generate_key(ssh / "id_ed25519")


def _env(folder: Path, server: GitSshServer, known_host_line: str) -> dict[str, str]:
    """The host's environment: its HOME, where ``~/.gitconfig`` points git and DVC's dulwich at its key and the
    server key it knows (``known_host_line``) through ``core.sshCommand``, and ``GIT_SSH_COMMAND`` set as the
    multi-host env file sets it (here the same command: OpenSSH reads ``~`` from the password database)."""
    home = folder / "home"
    known_hosts = home / ".ssh" / "known_hosts"
    known_hosts.write_text(known_host_line)
    ssh_command = server.ssh_command(home / ".ssh" / "id_ed25519", known_hosts)
    identity = f"[user]\n\tname = {folder.name}\n\temail = {folder.name}@xdistill.invalid\n"
    (home / ".gitconfig").write_text(f"{identity}[core]\n\tsshCommand = {ssh_command}\n")
    env = child_env(HOME=str(home), GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0")
    for name in UNSET:
        env.pop(name, None)
    return {**env, "GIT_SSH_COMMAND": ssh_command}


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False)


def _ok(cmd: list[str], cwd: Path, env: dict[str, str]) -> str:
    proc = _run(cmd, cwd, env)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout.strip()


def _refused(cmd: list[str], cwd: Path, env: dict[str, str]) -> str:
    proc = _run(cmd, cwd, env)
    assert proc.returncode != 0, f"{' '.join(cmd)} was not refused:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def _refs(repo: Path) -> dict[str, str]:
    """``{ref: commit}`` of a repository, read on its own disk (not over SSH)."""
    lines = run(["git", "--git-dir", str(repo), "for-each-ref", "--format=%(refname) %(objectname)"], repo).stdout
    return dict(line.split() for line in lines.splitlines())


def _seed(folder: Path) -> Path:
    """The team's checkout that fills the new git remote: a git + DVC project with a params.yaml."""
    folder.mkdir()
    init_git_dvc(folder)
    (folder / "params.yaml").write_text(yaml.safe_dump({"train": {"steps": 100}}))
    run(["git", "add", "params.yaml", ".dvc", ".dvcignore"], folder)
    run(["git", "commit", "-q", "-m", "seed"], folder)
    return folder


@pytest.mark.timeout(180)
@pytest.mark.slow
def test_hosts_push_and_fetch_branches_and_experiments_over_ssh_with_their_keys_only(tmp_path: Path) -> None:
    port = free_port()
    services = Services(REMOTE_HOST, tmp_path / "services", ssh_port=port)
    services.start_git(_seed(tmp_path / "team-checkout"))  # beyond loopback: the bare repository, no git daemon
    assert services.procs == {} and (services.git_repo / "HEAD").is_file()
    assert services.git_remote == f"ssh://{REMOTE_HOST}:{port}{services.git_repo}"  # the env file's URL
    assert Services(REMOTE_HOST, tmp_path / "services").git_remote == f"ssh://{REMOTE_HOST}{services.git_repo}"
    url = ssh_git_remote("127.0.0.1", services.git_repo, port)  # the same URL, at the server of this test
    seeded = _refs(services.git_repo)

    keys = {name: _host(tmp_path / name) for name in ("host-a", "host-b", "intruder", "misled")}
    for key in keys.values():
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
    host_key = generate_key(tmp_path / "ssh_host_ed25519_key")
    authorized = [keys["host-a"], keys["host-b"], keys["misled"]]
    server = GitSshServer(services.git_repo.parent, authorized, host_key, port)
    impostor = GitSshServer(services.git_repo.parent, [], generate_key(tmp_path / "impostor_host_key"), port)
    with server:
        env = {name: _env(tmp_path / name, server, server.known_hosts_line()) for name in keys if name != "misled"}
        # an authorized host whose known_hosts names another key for the services host (as a man in the middle
        # would look to the others): git and DVC refuse to talk to the server
        env["misled"] = _env(tmp_path / "misled", server, impostor.known_hosts_line())

        # host A: clone over SSH, push a branch, then a DVC experiment (as the distill flow does: to the URL)
        a = tmp_path / "host-a"
        _ok(["git", "clone", "--quiet", url, "clone"], a, env["host-a"])
        clone_a = a / "clone"
        _ok(["git", "checkout", "--quiet", "-b", "feature"], clone_a, env["host-a"])
        (clone_a / "notes.md").write_text("made on host A\n")
        _ok(["git", "add", "notes.md"], clone_a, env["host-a"])
        _ok(["git", "commit", "--quiet", "-m", "host A's change"], clone_a, env["host-a"])
        _ok(["git", "push", "--quiet", "origin", "feature"], clone_a, env["host-a"])
        feature = _ok(["git", "rev-parse", "HEAD"], clone_a, env["host-a"])
        (clone_a / "params.yaml").write_text(yaml.safe_dump({"train": {"steps": 7}}))
        _ok([*DVC, "exp", "save", "--name", "ssh-exp"], clone_a, env["host-a"])
        exp_ref = f"refs/exps/{feature[:2]}/{feature[2:]}/ssh-exp"
        experiment = _ok(["git", "rev-parse", exp_ref], clone_a, env["host-a"])
        _ok([*DVC, "exp", "push", "--no-cache", url, "ssh-exp"], clone_a, env["host-a"])
        pushed = _refs(services.git_repo)
        assert pushed == {**seeded, "refs/heads/feature": feature, exp_ref: experiment}

        # host B: fetches both over SSH and has host A's commits
        b = tmp_path / "host-b"
        _ok(["git", "clone", "--quiet", url, "clone"], b, env["host-b"])
        clone_b = b / "clone"
        assert _ok(["git", "ls-remote", url, "refs/exps/*"], clone_b, env["host-b"]) == f"{experiment}\t{exp_ref}"
        _ok(["git", "fetch", "--quiet", "origin", "feature"], clone_b, env["host-b"])
        assert _ok(["git", "rev-parse", "FETCH_HEAD"], clone_b, env["host-b"]) == feature
        _ok([*DVC, "exp", "pull", "--no-cache", "origin", "ssh-exp"], clone_b, env["host-b"])
        assert _ok(["git", "rev-parse", exp_ref], clone_b, env["host-b"]) == experiment
        params = _ok(["git", "show", f"{experiment}:params.yaml"], clone_b, env["host-b"])
        assert yaml.safe_load(params) == {"train": {"steps": 7}}

        # a key the server does not know: no clone, no push of a branch or an experiment
        c = tmp_path / "intruder"
        denied = _refused(["git", "clone", "--quiet", url, "clone"], c, env["intruder"])
        assert "Permission denied (publickey)" in denied and not (c / "clone").exists()
        _ok(["git", "clone", "--quiet", str(services.git_repo), "clone"], c, env["intruder"])  # a copy from elsewhere
        clone_c = c / "clone"
        (clone_c / "notes.md").write_text("not from the team\n")
        _ok(["git", "add", "notes.md"], clone_c, env["intruder"])
        _ok(["git", "commit", "--quiet", "-m", "intrusion"], clone_c, env["intruder"])
        assert "Permission denied (publickey)" in _refused(
            ["git", "push", url, "HEAD:refs/heads/intruder"], clone_c, env["intruder"]
        )
        (clone_c / "params.yaml").write_text(yaml.safe_dump({"train": {"steps": 1}}))
        _ok([*DVC, "exp", "save", "--name", "intruder-exp"], clone_c, env["intruder"])
        _refused([*DVC, "exp", "push", "--no-cache", url, "intruder-exp"], clone_c, env["intruder"])

        m = tmp_path / "misled"
        assert "Host key verification failed" in _refused(["git", "ls-remote", url], m, env["misled"])
        _ok(["git", "clone", "--quiet", str(services.git_repo), "clone"], m, env["misled"])  # a copy from elsewhere
        (m / "clone" / "params.yaml").write_text(yaml.safe_dump({"train": {"steps": 2}}))
        _ok([*DVC, "exp", "save", "--name", "misled-exp"], m / "clone", env["misled"])
        _refused([*DVC, "exp", "push", "--no-cache", url, "misled-exp"], m / "clone", env["misled"])

        # an authorized key runs git's pack commands for the services' repositories, nothing else
        elsewhere = tmp_path / "services" / "elsewhere.git"
        run(["git", "init", "--quiet", "--bare", str(elsewhere)], tmp_path)
        outside = ssh_git_remote("127.0.0.1", elsewhere, port)
        assert "refused" in _refused(["git", "ls-remote", outside], clone_a, env["host-a"])
        escape = ssh_git_remote("127.0.0.1", services.git_repo.parent / ".." / "elsewhere.git", port)
        assert "refused" in _refused(["git", "ls-remote", escape], clone_a, env["host-a"])
        ssh = shlex.split(server.ssh_command(keys["host-a"], a / "home" / ".ssh" / "known_hosts"))
        ran = tmp_path / "ran"
        assert "refused" in _refused([*ssh, "-p", str(port), "127.0.0.1", "touch", str(ran)], a, env["host-a"])
        assert not ran.exists()
        escaped = services.git_repo.parent / ".." / "elsewhere.git"
        assert server.refused == [f"git-upload-pack '{elsewhere}'", f"git-upload-pack '{escaped}'", f"touch {ran}"]

    assert _refs(services.git_repo) == pushed  # nothing of the intruder's
    assert not _refs(elsewhere)


def test_the_server_runs_only_git_pack_commands_inside_its_folder(tmp_path: Path) -> None:
    root = tmp_path / "git"
    (root / "repo.git").mkdir(parents=True)
    (tmp_path / "link.git").symlink_to(root / "repo.git")
    (root / "out.git").symlink_to(tmp_path)
    server = GitSshServer(root, [], generate_key(tmp_path / "host_key"), free_port())
    repo = str((root / "repo.git").resolve())
    assert server.git_command(f"git-upload-pack '{repo}'") == ["git", "upload-pack", repo]
    assert server.git_command(f"git-receive-pack '{repo}'") == ["git", "receive-pack", repo]
    assert server.git_command(f"git-upload-pack '{tmp_path}/link.git'") == ["git", "upload-pack", repo]
    for command in (
        None,  # a shell
        "",
        "sh -c id",
        f"git-upload-archive '{repo}'",
        f"git upload-pack '{repo}'",
        f"git-upload-pack '{repo}' extra",
        f"git-upload-pack '{repo}'; id",
        "git-upload-pack 'repo.git'",  # relative: the account's home
        f"git-upload-pack '{root}'",
        f"git-upload-pack '{root}/../elsewhere.git'",
        f"git-upload-pack '{root}/out.git/x'",  # a link out of the folder
        "git-upload-pack '/etc'",
        "git-upload-pack 'unbalanced",
    ):
        assert server.git_command(command) is None, command
