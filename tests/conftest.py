"""Shared pytest fixtures: where the repository and the corpora mirror are."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import xdistill  # noqa: F401  (sets the offline / no-telemetry environment)

REPO_ROOT = Path(__file__).resolve().parent.parent


def _mirror() -> Path:
    return Path(os.environ.get("XDISTILL_MIRROR", REPO_ROOT.parent / "shared" / "corpora")).resolve()


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def mirror_dir() -> Path:
    """The offline corpora mirror (env XDISTILL_MIRROR, default ../shared/corpora)."""
    path = _mirror()
    if not (path / "README.md").is_file():
        pytest.fail(f"corpora mirror not found at {path}; set XDISTILL_MIRROR")
    return path
