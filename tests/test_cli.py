"""The ``xdistill`` dispatcher (click): help without heavy imports, errors, exit codes, completion."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from xdistill.cli.main import COMMANDS, cli, main


def test_help_lists_every_command_without_importing_them(capsys: pytest.CaptureFixture[str]) -> None:
    # a fresh interpreter: `xdistill --help` must not import torch or any command module
    code = (
        "import sys; from xdistill.cli.main import main; main(['--help']); "
        "print(sorted(m for m in sys.modules if m.startswith(('torch', 'xdistill.cli.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    words = " ".join(out.split())  # help lines wrap at the terminal width
    for name, (_, short_help) in COMMANDS.items():
        assert f"{name} {short_help}" in words
    assert out.strip().splitlines()[-1] == "['xdistill.cli.main']"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([name, "--help"]) == 0
    assert f"Usage: xdistill {name}" in capsys.readouterr().out


def test_usage_errors_exit_2_and_say_what_is_wrong(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["no-such-command"]) == 2
    assert "No such command 'no-such-command'" in capsys.readouterr().err
    assert main(["encode", str(tmp_path / "absent.txt"), "--model", "x", "-o", str(tmp_path / "o.npy")]) == 2
    assert "absent.txt' does not exist" in capsys.readouterr().err
    assert main(["mine", "a", "b"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["mine", "--model", "x", "-k", "0", str(tmp_path), str(tmp_path)]) == 2


def test_a_user_error_is_one_line_with_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parallel", "--params", str(tmp_path / "missing.yaml")]) == 2
    err = capsys.readouterr().err
    assert (
        err
        == f"error: {tmp_path / 'missing.yaml'}: params file not found (run from the project root or pass --params)\n"
    )


def test_shell_completion_offers_commands_and_choices() -> None:
    def complete(words: str, cword: int) -> list[str]:
        env = {**os.environ, "COMP_WORDS": words, "COMP_CWORD": str(cword), "_XDISTILL_COMPLETE": "bash_complete"}
        proc = subprocess.run([sys.executable, "-m", "xdistill.cli.main"], env=env, capture_output=True, text=True)
        return [line.split(",", 1)[1] for line in proc.stdout.splitlines()]

    assert complete("xdistill te", 1) == ["teacher-embed"]
    assert complete("xdistill mine --margin ", 3) == ["ratio", "distance", "absolute"]
    assert complete("xdistill models ", 2) == ["check-conversion", "fingerprint", "list", "resolve"]
    assert cli.name == "cli"  # the group object itself is importable for click's own tooling
