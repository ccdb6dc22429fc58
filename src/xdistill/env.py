"""Process-wide environment defaults.

The project's machines reach no model hub and no telemetry host. Every tool in the stack
(huggingface, DVC, MLflow, Prefect) otherwise tries the network at import or start-up, which
is slow and noisy, so these defaults are applied as soon as ``xdistill`` is imported. A user
with network access can override any of them by exporting the variable first.
"""

from __future__ import annotations

import os
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


def keep_tools_offline() -> None:
    """Set the offline/telemetry variables unless the user already chose a value."""
    for name, value in OFFLINE_DEFAULTS.items():
        os.environ.setdefault(name, value)


def child_env(**extra: str) -> dict[str, str]:
    """Environment for the tools this project starts (dvc, xdistill, prefect, mlflow).

    This interpreter's ``bin`` folder first on ``PATH`` (so a child finds the same environment's
    tools), every tool offline (:data:`OFFLINE_DEFAULTS` override the parent's values, since a
    child must never try the network), then ``extra``.
    """
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(OFFLINE_DEFAULTS)
    env.update(extra)
    return env
