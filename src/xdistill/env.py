"""Process-wide environment defaults.

The project's machines reach no model hub and no telemetry host. Every tool in the stack
(huggingface, DVC, MLflow, Prefect) otherwise tries the network at import or start-up, which
is slow and noisy, so these defaults are applied as soon as ``xdistill`` is imported. A user
with network access can override any of them by exporting the variable first.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

OFFLINE_DEFAULTS: dict[str, str] = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "DVC_NO_ANALYTICS": "1",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "true",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "TOKENIZERS_PARALLELISM": "false",
}


# The variables of OFFLINE_DEFAULTS the user had exported before xdistill was imported: their choice, kept
# for every child too (HF_HUB_OFFLINE=0 lets a hub id resolve where a hub is reachable).
USER_CHOICES: dict[str, str] = {}


def keep_tools_offline() -> None:
    """Set the offline/telemetry variables unless the user already chose a value."""
    for name, value in OFFLINE_DEFAULTS.items():
        if name in os.environ:
            USER_CHOICES[name] = os.environ[name]
        os.environ.setdefault(name, value)


def child_env(**extra: str) -> dict[str, str]:
    """Environment for the tools this project starts (dvc, xdistill, prefect, mlflow).

    This interpreter's ``bin`` folder first on ``PATH`` (so a child finds the same environment's
    tools), every tool offline (:data:`OFFLINE_DEFAULTS` replace whatever else set them since start-up)
    except where the user exported a value before (:data:`USER_CHOICES`), then ``extra``.
    """
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(OFFLINE_DEFAULTS)
    env.update(USER_CHOICES)
    env.update(extra)
    return env


MIRROR_ENV = "XDISTILL_MIRROR"


def find_mirror(repo_root: str | Path) -> Path:
    """The corpora mirror the tests and benchmarks read: ``XDISTILL_MIRROR`` if set, else the first
    ``shared/corpora`` folder beside this checkout or beside the local repository it was cloned from.

    The second place lets a fresh ``git clone`` anywhere (a CI scratch folder) find the mirror of
    the checkout it came from. Returns the first candidate when none exists, so the caller's error
    names where the mirror was expected.
    """
    if os.environ.get(MIRROR_ENV):
        return Path(os.environ[MIRROR_ENV]).resolve()
    root = Path(repo_root).resolve()
    candidates = [root.parent / "shared" / "corpora"]
    origin = _local_origin(root)
    if origin is not None:
        candidates.append(origin.parent / "shared" / "corpora")
    return next((c.resolve() for c in candidates if c.is_dir()), candidates[0].resolve())


def _local_origin(repo_root: Path) -> Path | None:
    """The folder ``remote.origin.url`` names when it is a local path (None for a remote host)."""
    try:
        url = subprocess.run(
            ["git", "-C", str(repo_root), "config", "--get", "remote.origin.url"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    url = url.removeprefix("file://")
    if not url or "://" in url or ":" in url.split("/", 1)[0]:  # https://host/..., git@host:path
        return None
    path = Path(url) if Path(url).is_absolute() else repo_root / url
    return path.resolve() if path.is_dir() else None
