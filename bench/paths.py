"""Where bench's files are: the checkout, its results folder, the corpora mirror; and recorded paths made portable."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "bench" / "results"


def mirror_dir() -> Path:
    """The corpora mirror: ``XDISTILL_MIRROR``, else ``../shared/corpora`` (see :func:`xdistill.env.find_mirror`)."""
    from xdistill.env import find_mirror

    return find_mirror(REPO_ROOT)


def portable_path(text: str) -> str:
    """``text`` without this machine's folders: a path inside the checkout becomes relative to it,
    a temporary folder becomes ``<tmp>`` (committed results carry no machine path)."""
    text = text.replace(str(REPO_ROOT) + os.sep, "")
    return re.sub(re.escape(tempfile.gettempdir()) + r"/[^/\s'\")]+", "<tmp>", text)


def portable_paths(value: Any) -> Any:
    """:func:`portable_path` on every string inside ``value`` (dicts, lists)."""
    if isinstance(value, str):
        return portable_path(value)
    if isinstance(value, dict):
        return {key: portable_paths(item) for key, item in value.items()}
    if isinstance(value, list):
        return [portable_paths(item) for item in value]
    return value
