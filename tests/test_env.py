"""Where the tests and benchmarks find the corpora mirror (xdistill.env.find_mirror), and the environment
the project's child processes get (xdistill.env.child_env)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from xdistill.env import MIRROR_ENV, find_mirror


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(path),
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "init",
        ],
        check=True,
    )
    return path


def test_mirror_beside_the_checkout_then_beside_its_origin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MIRROR_ENV, raising=False)
    origin = make_repo(tmp_path / "work" / "main")
    mirror = tmp_path / "work" / "shared" / "corpora"
    mirror.mkdir(parents=True)
    assert find_mirror(origin) == mirror.resolve()

    clone = tmp_path / "scratch" / "p"  # a fresh clone somewhere else: found through remote.origin.url
    subprocess.run(["git", "clone", "-q", str(origin), str(clone)], check=True)
    assert find_mirror(clone) == mirror.resolve()

    beside = tmp_path / "scratch" / "shared" / "corpora"  # one beside the clone itself wins
    beside.mkdir(parents=True)
    assert find_mirror(clone) == beside.resolve()


def test_mirror_from_the_environment_and_the_expected_place_when_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path / "alone" / "p")
    monkeypatch.delenv(MIRROR_ENV, raising=False)
    assert find_mirror(repo) == (tmp_path / "alone" / "shared" / "corpora").resolve()  # named in the error
    monkeypatch.setenv(MIRROR_ENV, str(tmp_path / "elsewhere"))
    assert find_mirror(repo) == (tmp_path / "elsewhere").resolve()


CHILD_HUB_SETTING = (
    "import xdistill.env as e, os; os.environ['HF_HUB_OFFLINE'] = 'set later'; "
    "print(e.child_env()['HF_HUB_OFFLINE'], e.child_env()['DVC_NO_ANALYTICS'])"
)


@pytest.mark.parametrize(("exported", "child_sees"), [(None, "1"), ("0", "0")])
def test_children_stay_offline_unless_the_user_exported_a_choice(exported: str | None, child_sees: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "DVC_NO_ANALYTICS")}
    if exported is not None:
        env["HF_HUB_OFFLINE"] = exported  # the user's choice before xdistill starts: a hub id may resolve
    out = subprocess.run([sys.executable, "-c", CHILD_HUB_SETTING], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [child_sees, "1"]
