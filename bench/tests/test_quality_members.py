"""The quality run's members: an interrupted member's workspace is found again (bench.quality.members)."""

from __future__ import annotations

from pathlib import Path

from bench.quality.members import interrupted_workspaces


def test_a_member_resumes_from_the_newest_workspace_its_killed_runs_left(tmp_path: Path) -> None:
    project = tmp_path / "main"
    project.mkdir()
    for name in ("q-20261126-2200", "q-20261127-0502", "q-1200-20261127-0600", "q-20261127-0700"):
        workspace = tmp_path / f".main-exp-{name}"
        (workspace / "data" / "checkpoints").mkdir(parents=True)
        if name != "q-20261127-0700":  # killed before its first checkpoint: nothing to resume
            (workspace / "data" / "checkpoints" / "last.pt").write_bytes(b"x")
    found = interrupted_workspaces(project, "q")
    # another member whose name extends this one ("q-1200") is never picked up
    assert [w.name for w in found] == [".main-exp-q-20261126-2200", ".main-exp-q-20261127-0502"]
