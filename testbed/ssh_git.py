"""A real SSH server for a git remote on 127.0.0.1 (asyncssh), standing in for the services host's sshd.

Beyond the loopback address the multi-host git remote is the bare repository over SSH
(:func:`flows.services.ssh_git_remote`); this server lets a test run that path without an sshd:

* it listens on 127.0.0.1 only, in a thread of its own (its own event loop), with a generated host key;
* public-key authentication only, against the keys it is given (no password, keyboard-interactive or GSS);
* a session may only exec ``git-upload-pack '<path>'`` or ``git-receive-pack '<path>'`` (what git and
  dulwich send over SSH) for a path inside one folder (the services' git folder); the command runs as a
  child process (``git upload-pack <path>``) with stdin, stdout and stderr piped through. Anything else (a
  shell, another command, a path outside the folder, port forwarding, SFTP) is refused.

:func:`generate_key` makes the keys (private key mode 600); :meth:`GitSshServer.ssh_command` is the ssh
command of a client host (``core.sshCommand`` or ``GIT_SSH_COMMAND``): OpenSSH with that host's key, checking
the server's host key against a known_hosts file that names it.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import threading
from pathlib import Path
from types import TracebackType

import asyncssh

GIT_COMMANDS = ("git-upload-pack", "git-receive-pack")
CHUNK = 65536


def generate_key(path: Path) -> Path:
    """A new ed25519 key: the private key at ``path`` (created with mode 600), the public one at ``path.pub``."""
    key = asyncssh.generate_private_key("ssh-ed25519")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(key.export_private_key())
    Path(f"{path}.pub").write_bytes(key.export_public_key())
    return path


def public_key_line(private_key: Path) -> str:
    """``<type> <base64>`` of a key made by :func:`generate_key` (its ``.pub`` file, no comment)."""
    return " ".join(Path(f"{private_key}.pub").read_text().split()[:2])


async def _copy(source: asyncio.StreamReader, sink: asyncssh.SSHWriter[bytes]) -> None:
    while chunk := await source.read(CHUNK):
        sink.write(chunk)
        await sink.drain()


async def _feed(source: asyncssh.SSHReader[bytes], sink: asyncio.StreamWriter) -> None:
    """The client's stdin into the child's, then EOF; a child that exits before reading it all ends this."""
    try:
        while chunk := await source.read(CHUNK):
            sink.write(chunk)
            await sink.drain()
    except (BrokenPipeError, ConnectionResetError):
        return
    sink.close()


class GitSshServer:
    """An SSH server on 127.0.0.1:``port`` that runs git's pack commands for the repositories under ``root``
    for clients holding one of ``authorized_keys`` (private key files made by :func:`generate_key`)."""

    def __init__(self, root: Path, authorized_keys: list[Path], host_key: Path, port: int) -> None:
        self.root = Path(os.path.realpath(root))
        self.authorized = "".join(f"{public_key_line(key)}\n" for key in authorized_keys)
        self.host_key = host_key
        self.port = port
        self.refused: list[str | None] = []  # the commands refused, in order (None: a shell)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name="git-ssh-server", daemon=True)
        self._ready = threading.Event()
        self._error: BaseException | None = None

    # --- what a client host needs ---------------------------------------------------------------------

    def known_hosts_line(self) -> str:
        """The known_hosts line of this server's host key (OpenSSH's ``[host]:port`` form)."""
        return f"[127.0.0.1]:{self.port} {public_key_line(self.host_key)}\n"

    def ssh_command(self, key: Path, known_hosts: Path) -> str:
        """The ssh command of a client with private key ``key``: no agent, no prompt, no user ssh config; the
        server's host key checked against ``known_hosts``. The port comes from the URL (git passes ``-p``)."""
        options = [
            "-F",
            "/dev/null",
            "-i",
            str(key),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            f"UserKnownHostsFile={known_hosts}",
            "-o",
            "LogLevel=ERROR",
        ]
        return shlex.join(["ssh", *options])

    # --- the server -----------------------------------------------------------------------------------

    def git_command(self, command: str | None) -> list[str] | None:
        """The child process for an exec request, or None when it is refused: only ``git-upload-pack`` /
        ``git-receive-pack`` of one absolute path inside :attr:`root` (symlinks and ``..`` resolved)."""
        if not command:
            return None
        try:
            words = shlex.split(command)
        except ValueError:
            return None
        if len(words) != 2 or words[0] not in GIT_COMMANDS or not os.path.isabs(words[1]):
            return None
        path = Path(os.path.realpath(words[1]))
        if path == self.root or not path.is_relative_to(self.root):
            return None
        return ["git", words[0].removeprefix("git-"), str(path)]

    async def _serve(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        argv = self.git_command(process.command)
        if argv is None:
            self.refused.append(process.command)
            process.stderr.write(
                f"refused: this server runs only {' / '.join(GIT_COMMANDS)} '<path>' for a repository in "
                f"{self.root}\n".encode()
            )
            process.exit(1)
            return
        env = dict(os.environ)
        protocol = process.env.get("GIT_PROTOCOL", "")  # what OpenSSH's SendEnv passes for git's protocol v2
        if re.fullmatch(r"version=\d", protocol):
            env["GIT_PROTOCOL"] = protocol
        pipe = asyncio.subprocess.PIPE
        child = await asyncio.create_subprocess_exec(*argv, stdin=pipe, stdout=pipe, stderr=pipe, env=env)
        assert child.stdin is not None and child.stdout is not None and child.stderr is not None
        feeding = asyncio.create_task(_feed(process.stdin, child.stdin))
        try:
            await asyncio.gather(_copy(child.stdout, process.stdout), _copy(child.stderr, process.stderr))
            status = await child.wait()
        finally:
            feeding.cancel()
            if child.returncode is None:  # the client went away first
                child.kill()
                await child.wait()
        process.exit(status)

    async def _listen(self) -> asyncssh.SSHAcceptor:
        return await asyncssh.create_server(
            asyncssh.SSHServer,
            "127.0.0.1",
            self.port,
            server_host_keys=[str(self.host_key)],
            authorized_client_keys=asyncssh.import_authorized_keys(self.authorized),
            password_auth=False,
            kbdint_auth=False,
            gss_host=None,
            agent_forwarding=False,
            x11_forwarding=False,
            allow_scp=False,
            line_editor=False,
            encoding=None,
            process_factory=self._serve,
        )

    def _run(self) -> None:
        loop = self._loop
        assert loop is not None
        asyncio.set_event_loop(loop)
        try:
            server = loop.run_until_complete(self._listen())
        except BaseException as exc:  # the test thread raises it (start)
            self._error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            server.close()
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            loop.run_until_complete(asyncio.gather(server.wait_closed(), *tasks, return_exceptions=True))
            loop.close()

    def start(self) -> GitSshServer:
        """Listen; return once the server accepts connections (raise why it could not)."""
        self._loop = asyncio.new_event_loop()
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError(f"the SSH server did not listen on 127.0.0.1:{self.port} within 30 s")
        if self._error is not None:
            raise RuntimeError(f"the SSH server could not listen on 127.0.0.1:{self.port}: {self._error}")
        return self

    def stop(self) -> None:
        """Stop listening, end the sessions and the thread."""
        if self._loop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)

    def __enter__(self) -> GitSshServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()
