"""Shared pytest fixtures: where the repository and the corpora mirror are."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
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


# The largest module (tests/test_pipeline.py: whole DVC pipelines with real students) peaks at about
# 3.8 GB of temp files; measured by polling `du` of pytest's base folder through a full run.
PEAK_TEMP_GB = 3.8


def pytest_report_header(config: pytest.Config) -> str:
    """Free disk where the temp folders go: a full disk shows up as scattered file errors, so say it up front."""
    import tempfile

    folder = tempfile.gettempdir()
    free_gb = shutil.disk_usage(folder).free / 1e9
    warning = "" if free_gb > 2 * PEAK_TEMP_GB else " -- LOW: tests that write files may fail with 'No space left'"
    return f"xdistill: {free_gb:.1f} GB free in {folder} (the suite peaks at ~{PEAK_TEMP_GB} GB){warning}"


@pytest.fixture(scope="module", autouse=True)
def _free_module_temp_dirs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Delete the temp folders a test module made once the module is over and none of its tests failed.

    The pipeline projects (a student copy, its checkpoints, the DVC cache) take gigabytes each; kept to the
    end of the session they add up to more than a CI machine's free disk (a full run once left 13 GB). A
    failed module keeps its folders for inspection. Every fixture that makes such folders is module-scoped,
    and this one is set up before them and torn down after them, so nothing still uses what it removes.
    """
    base = tmp_path_factory.getbasetemp()
    before = set(base.iterdir())
    failures_before = request.session.testsfailed
    yield
    if request.session.testsfailed != failures_before:
        return
    for folder in set(base.iterdir()) - before:
        shutil.rmtree(folder, ignore_errors=True)
