"""Build a throw-away copy of the pipeline (dvc.yaml, params.yaml, src/) in a temp folder.

Used by the end-to-end tests of the DVC pipeline and of the Prefect flows, and by the end-to-end
benchmark (``bench.perf.e2e``): each gets its own git + DVC workspace, so they never touch the
repository's own dvc.lock, data or MLflow store.
``TINY_PARAMS`` shrinks every stage to seconds; callers can deep-merge more overrides.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent


def pipeline_stages() -> list[str]:
    """The stages of dvc.yaml in the order it declares them: the order a cold ``dvc repro`` runs them in."""
    return list(yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"])


# Overrides of params.yaml that keep a whole `dvc repro` to a couple of minutes on 2 cores.
TINY_PARAMS: dict[str, Any] = {
    "languages": ["de", "es"],
    # dev mining blocks of 40 pairs (the default's 300 would cost more validation than the tiny training)
    "parallel": {"max_train_pairs": 240, "dev_pairs_per_language": 20, "dev_mining_block": 40},
    "train": {
        "steps": 6,
        "batch_size": 8,
        "eval_every": 3,
        "checkpoint_every": 3,
        "max_seq_length": 32,
        "dev_max_pairs": 24,
        "dev_sts_max_pairs": 20,
        "align_pairs": 240,
        "interpolation": [0.0, 0.5, 1.0],
        "student": {"keep_layers": 2},
        "teacher_adapter": {"pairs": 240, "hidden": 64, "epochs": 10, "batch_pairs": 32},
    },
    "runtime": {"log_every": 1},
    "evaluate": {
        "benchmarks": ["sts17", "stsb", "tatoeba", "dev", "teacher_space"],
        "sts17_max_pairs": 40,
        "stsb_max_pairs": 30,
        "tatoeba_max_pairs": 40,
        "dev_max_pairs": 20,
        "pca_sentences": 4,
        "muse": False,
    },
}


def deep_merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Return ``base`` with ``overrides`` merged in recursively (overrides win)."""
    merged = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def pipeline_env() -> dict[str, str]:
    """Environment for subprocesses: the venv's bin first, every tool offline."""
    from xdistill.env import child_env

    return child_env()


def run(cmd: list[str], cwd: Path, check: bool = True, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    """Run a command in ``cwd`` with :func:`pipeline_env`, capturing text output."""
    proc = subprocess.run(
        cmd, cwd=cwd, env=pipeline_env(), capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def init_git_dvc(dest: Path) -> None:
    """``dest`` becomes an empty git + DVC repository (offline DVC, a test identity for commits)."""
    for cmd in (
        ["git", "init", "-q"],
        ["git", "config", "user.email", "test@xdistill.invalid"],
        ["git", "config", "user.name", "xdistill tests"],
        ["dvc", "init", "-q"],
        ["dvc", "config", "core.analytics", "false"],
        ["dvc", "config", "core.check_update", "false"],
    ):
        run(cmd, dest)


def make_pipeline_project(dest: Path, mirror: Path, overrides: dict[str, Any] | None = None, tiny: bool = True) -> Path:
    """Copy the pipeline into ``dest`` (a git + DVC repo, one commit), with tiny params unless ``tiny`` is False."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(REPO_ROOT / "dvc.yaml", dest / "dvc.yaml")
    shutil.copytree(REPO_ROOT / "src", dest / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for extra in ("prefect.yaml", "flows"):
        source = REPO_ROOT / extra
        if source.is_dir():
            shutil.copytree(source, dest / extra, ignore=shutil.ignore_patterns("__pycache__"))
        elif source.is_file():
            shutil.copy2(source, dest / extra)
    params = yaml.safe_load((REPO_ROOT / "params.yaml").read_text(encoding="utf-8"))
    if tiny:
        params = deep_merge(params, TINY_PARAMS)
    params = deep_merge(params, {"corpora": {"mirror": str(mirror)}})
    params = deep_merge(params, overrides or {})
    (dest / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    shutil.copy2(REPO_ROOT / ".gitignore", dest / ".gitignore")
    init_git_dvc(dest)
    run(["git", "add", "-A"], dest)
    run(["git", "commit", "-qm", "pipeline under test"], dest)
    return dest
