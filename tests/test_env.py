"""Where the tests and benchmarks find the corpora mirror (xdistill.env.find_mirror)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from xdistill.env import MIRROR_ENV, find_mirror


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    subprocess.run(["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "init"], check=True)
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
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path / "alone" / "p")
    monkeypatch.delenv(MIRROR_ENV, raising=False)
    assert find_mirror(repo) == (tmp_path / "alone" / "shared" / "corpora").resolve()  # named in the error
    monkeypatch.setenv(MIRROR_ENV, str(tmp_path / "elsewhere"))
    assert find_mirror(repo) == (tmp_path / "elsewhere").resolve()
