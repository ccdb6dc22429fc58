"""Shared pytest fixtures: where the repository and the corpora mirror are."""

from __future__ import annotations

from pathlib import Path

import pytest

import xdistill  # noqa: F401  (sets the offline / no-telemetry environment)
from xdistill.env import find_mirror

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def mirror_dir() -> Path:
    """The offline corpora mirror (env XDISTILL_MIRROR, default ../shared/corpora: see find_mirror)."""
    path = find_mirror(REPO_ROOT)
    if not (path / "README.md").is_file():
        pytest.fail(f"corpora mirror not found at {path}; set XDISTILL_MIRROR")
    return path
