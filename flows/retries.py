"""When a flow task is retried: a tool that failed may succeed on a second try, a refusal never does."""

from __future__ import annotations

from typing import Any

from xdistill.errors import XdistillError
from xdistill.registry.store import PromotionLockBusy


def retry_unless_refused(task: Any, task_run: Any, state: Any) -> bool:
    """A task's retry condition: retry a tool that failed (a git or DVC lock a concurrent run held, a disk freed
    meanwhile) or a promotion lock another promotion held, never a refusal (ValueError, XdistillError: an
    existing workspace, a taken experiment name, a bad setting), which would only fail the same way again."""
    error = getattr(state, "data", None)
    return isinstance(error, PromotionLockBusy) or not isinstance(error, ValueError | XdistillError)
