"""The distill flow's path parameters name only what the worker allows: its own project (or those it lists),
workspaces inside its workspace roots, and resume_from a workspace a distill run made (flows/workspace.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from prefect.logging import disable_run_logger

from flows import distill as distill_flows
from flows import workspace as run_workspace
from flows.workspace import (
    ALLOWED_PROJECTS_ENV,
    PROJECT_ROOT_ENV,
    WORKSPACE_MARKER,
    WORKSPACE_ROOTS_ENV,
    allowed_project,
    allowed_resume_from,
    allowed_workspace_parent,
)


def _fake_project(path: Path) -> Path:
    """What project_root recognises: dvc.yaml and a git repository."""
    (path / ".git").mkdir(parents=True)
    (path / "dvc.yaml").write_text("stages: {}\n", encoding="utf-8")
    return path


@pytest.fixture()
def worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A worker whose project is ``<tmp>/base/own``; nothing else allowed."""
    own = _fake_project(tmp_path / "base" / "own")
    monkeypatch.setenv(PROJECT_ROOT_ENV, str(own))
    monkeypatch.delenv(ALLOWED_PROJECTS_ENV, raising=False)
    monkeypatch.delenv(WORKSPACE_ROOTS_ENV, raising=False)
    return own


def test_a_run_names_only_the_workers_own_project_or_one_it_lists(
    worker: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = _fake_project(tmp_path / "team" / "other")
    (tmp_path / "base" / "link").symlink_to(other)
    assert allowed_project(None) == worker
    assert allowed_project(str(worker)) == worker
    assert allowed_project(str(worker / ".." / "own")) == worker
    for escape in (str(other), str(worker / ".." / ".." / "team" / "other"), str(tmp_path / "base" / "link")):
        with pytest.raises(ValueError, match=rf"project='{escape}' \({other}\) is not a project this worker runs: "):
            allowed_project(escape)
    with pytest.raises(ValueError, match=f"allowed are {worker} .*XDISTILL_ALLOWED_PROJECTS"):
        allowed_project("/")

    monkeypatch.setenv(ALLOWED_PROJECTS_ENV, f"{tmp_path / 'nowhere'}{os.pathsep}{tmp_path / 'base' / 'link'}")
    assert allowed_project(str(other)) == other  # listed (through a symlink: the folders are compared resolved)
    assert allowed_project(str(tmp_path / "base" / "link")) == other


def test_a_workspace_parent_stays_inside_the_workspace_roots(
    worker: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, outside = tmp_path / "base", tmp_path / "outside"
    (base / "runs").mkdir()
    outside.mkdir()
    (base / "out").symlink_to(outside)
    assert allowed_workspace_parent(None, worker) == base  # beside the project, as before
    assert allowed_workspace_parent(str(base), worker) == base
    assert allowed_workspace_parent(str(base / "runs"), worker) == base / "runs"
    for escape in (str(outside), str(base / ".." / "outside"), str(base / "out"), str(base / "out" / ".."), "/"):
        with pytest.raises(ValueError, match=rf"workspace_parent='{escape}' resolves to .*, outside the workspace"):
            allowed_workspace_parent(escape, worker)
    with pytest.raises(ValueError, match=r"is not a folder"):
        allowed_workspace_parent(str(base / "absent"), worker)

    monkeypatch.setenv(WORKSPACE_ROOTS_ENV, str(outside))  # the worker's roots replace the default
    assert allowed_workspace_parent(None, worker) == outside
    assert allowed_workspace_parent(str(base / "out"), worker) == outside
    with pytest.raises(ValueError, match=f"outside the workspace roots this worker allows: {outside} "):
        allowed_workspace_parent(str(base / "runs"), worker)


def test_resume_from_takes_only_a_workspace_a_distill_run_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flows_helpers import make_mini_project

    project = make_mini_project(tmp_path / "base" / "mini")
    monkeypatch.setenv(PROJECT_ROOT_ENV, str(project))
    monkeypatch.delenv(WORKSPACE_ROOTS_ENV, raising=False)
    with disable_run_logger():
        made = Path(run_workspace.prepare_workspace.fn(str(project), "killed"))
    assert made.parent == project.parent and (made / WORKSPACE_MARKER).is_file()
    assert run_workspace.run_checked(["git", "status", "--porcelain"], made) == ""  # the marker is no change
    (made / "data" / "checkpoints").mkdir(parents=True)
    (made / "data" / "checkpoints" / "last.pt").write_bytes(b"hours of training")
    assert allowed_resume_from(str(made), project) == made

    # a folder with checkpoints but no marker, one outside the roots, links and `..` out of them
    plain = tmp_path / "base" / ".mini-exp-plain"
    (plain / "data" / "checkpoints").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere" / ".mini-exp-x"
    (elsewhere / ".git").mkdir(parents=True)
    (elsewhere / WORKSPACE_MARKER).write_text("{}\n")
    (tmp_path / "base" / ".mini-exp-link").symlink_to(elsewhere)
    with pytest.raises(ValueError, match=rf"resume_from='{plain}': .* is not the workspace of a distill run"):
        allowed_resume_from(str(plain), project)
    for escape in (
        elsewhere,
        tmp_path / "base" / ".mini-exp-link",
        made / ".." / ".." / "elsewhere" / ".mini-exp-x",
        tmp_path / "base",
        Path("/etc"),
    ):
        with pytest.raises(ValueError, match=rf"resume_from='{escape}' resolves to .*, not a workspace inside"):
            allowed_resume_from(str(escape), project)

    # a workspace of ours whose checkpoints lead elsewhere: nothing is copied from there
    secret = tmp_path / "elsewhere" / "secret.pt"
    secret.write_bytes(b"not the run's")
    fresh = tmp_path / "base" / ".mini-exp-fresh"
    (made / "data" / "checkpoints" / "best.pt").symlink_to(secret)
    with pytest.raises(ValueError, match=r"resume_from: best.pt in .* are not plain files"):
        run_workspace.copy_checkpoints(made, fresh)
    (made / "data" / "checkpoints" / "best.pt").unlink()
    with disable_run_logger():  # the legitimate use: the killed run's checkpoints seed the new run
        assert run_workspace.seed_checkpoints.fn(str(fresh), str(allowed_resume_from(str(made), project))) == [
            "last.pt"
        ]
    assert (fresh / "data" / "checkpoints" / "last.pt").read_bytes() == b"hours of training"
    linked = tmp_path / "base" / ".mini-exp-linked"
    (linked / "data").mkdir(parents=True)
    (linked / "data" / "checkpoints").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ValueError, match=r"resume_from: .*data/checkpoints leads out of"):
        run_workspace.copy_checkpoints(linked, fresh)


@pytest.mark.parametrize(
    ("parameter", "value"),
    [("project", "{tmp}/other"), ("workspace_parent", "{tmp}/.."), ("resume_from", "{tmp}/base/own/../../..")],
)
def test_the_flow_refuses_a_path_it_does_not_allow_before_any_work(
    worker: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parameter: str, value: str
) -> None:
    _fake_project(tmp_path / "other")

    def no_work(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the run started work")

    for step in ("check_new_experiment", "prepare_workspace", "run_params"):
        monkeypatch.setattr(distill_flows, step, no_work)
    given = value.format(tmp=tmp_path)
    with disable_run_logger(), pytest.raises(ValueError, match=rf"^{parameter}='{given}'"):
        distill_flows.distill.fn(experiment="e", **{parameter: given})
