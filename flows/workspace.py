"""A run's private workspace: made from the project's last commit, given the run's params, pushed back as a
DVC experiment, and deleted afterwards unless it holds training work.

The workspace is a clone of the project's last commit beside the project (so relative paths in
params.yaml such as ``../shared/corpora`` still resolve) that uses the project's DVC cache; the
committed outputs are checked out of it (lock entries whose outputs were built elsewhere are
dropped, so that DVC looks for them in its run cache: :func:`forget_unrestorable_lock_entries`).
With ``resume_from``, an interrupted run's training checkpoints are copied in
(:func:`seed_checkpoints`). ``dvc exp push <project> <experiment>`` stores the finished experiment in
the project (:func:`push_experiment`): ``dvc exp show`` lists it and ``dvc exp apply <experiment>``
restores it from the shared cache.

Hosts that share no disk (docs/multi-host.md) set ``XDISTILL_EXP_REMOTE`` (the ``distill/remote`` deployment:
``origin``, the git remote its pull step cloned): the workspace takes the project's DVC remote, experiment
names are checked against that git remote too, and ``dvc exp push <remote> <experiment>`` sends the experiment
there with its DVC data (no ``--no-cache``): ``dvc exp pull <remote> <experiment>`` brings it to any host.

What a run may name is the worker's to decide, not the run's (anyone who can start a run sets its parameters):
``project`` is the worker's own project (``XDISTILL_PROJECT_ROOT`` or its working directory) or one listed in
``XDISTILL_ALLOWED_PROJECTS``; ``workspace_parent`` lies inside a workspace root (the project's parent folder, or
those of ``XDISTILL_WORKSPACE_ROOTS``); ``resume_from`` is a workspace a distill run made there (it holds
``.git/xdistill-workspace``). Paths are compared with their symlinks resolved (:func:`allowed_project`,
:func:`allowed_workspace_parent`, :func:`allowed_resume_from`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml
from prefect import get_run_logger, task
from prefect.runtime import flow_run

from flows.dvc_process import dvc_cmd, run_checked, tool_env
from flows.retries import retry_unless_refused
from xdistill.io import write_text_atomic
from xdistill.params_file import check_stage_params, write_params
from xdistill.profiles import apply_profile

EXP_REMOTE_ENV = "XDISTILL_EXP_REMOTE"
PROJECT_ROOT_ENV = "XDISTILL_PROJECT_ROOT"
ALLOWED_PROJECTS_ENV = "XDISTILL_ALLOWED_PROJECTS"  # further projects a worker runs (os.pathsep-separated)
WORKSPACE_ROOTS_ENV = "XDISTILL_WORKSPACE_ROOTS"  # where workspaces may go (os.pathsep-separated)
# what marks a folder as a workspace prepare_workspace made; in .git, where neither git nor DVC sees it
WORKSPACE_MARKER = Path(".git") / "xdistill-workspace"


def experiment_remote(root: Path) -> str | None:
    """The git remote experiments go to (``XDISTILL_EXP_REMOTE``: a remote of the project such as ``origin``,
    or a URL), as a URL; None: the project itself (one host)."""
    remote = os.environ.get(EXP_REMOTE_ENV, "").strip()
    if not remote or "://" in remote or remote.startswith(("/", ".")):
        return remote or None
    try:
        return run_checked(["git", "remote", "get-url", remote], root)
    except RuntimeError:
        raise ValueError(f"{EXP_REMOTE_ENV}={remote}: {root} has no git remote of that name") from None


def remote_experiment_refs(url: str, root: Path) -> dict[str, str]:
    """``{ref: commit}`` of the DVC experiments on git remote ``url``."""
    lines = run_checked(["git", "ls-remote", url, "refs/exps/*"], root)
    return {ref: commit for commit, ref in (line.split("\t", 1) for line in lines.splitlines()) if ref.count("/") >= 4}


def project_root(path: str | None = None) -> Path:
    """The project checkout (a git + DVC repo): ``path``, ``XDISTILL_PROJECT_ROOT`` or the cwd."""
    root = Path(path or os.environ.get("XDISTILL_PROJECT_ROOT") or Path.cwd()).resolve()
    if not (root / "dvc.yaml").is_file() or not (root / ".git").exists():
        raise ValueError(f"{root}: not the xdistill project (needs dvc.yaml and a git repository)")
    return root


def _env_paths(name: str) -> list[Path]:
    """The folders an os.pathsep-separated variable lists, symlinks resolved."""
    return [Path(part).expanduser().resolve() for part in os.environ.get(name, "").split(os.pathsep) if part.strip()]


def _inside(path: Path, roots: list[Path]) -> bool:
    return any(path.is_relative_to(root) for root in roots)


def _listed(paths: list[Path]) -> str:
    return ", ".join(str(path) for path in dict.fromkeys(paths))


def allowed_project(requested: str | None) -> Path:
    """The run's project: the worker's own (``XDISTILL_PROJECT_ROOT`` or the working directory) unless the run
    names one that the worker lists in ``XDISTILL_ALLOWED_PROJECTS``; any other is refused."""
    if requested is None:
        return project_root()
    own = Path(os.environ.get(PROJECT_ROOT_ENV) or Path.cwd()).resolve()
    allowed = [own, *_env_paths(ALLOWED_PROJECTS_ENV)]
    path = Path(requested).expanduser().resolve()
    if path not in allowed:
        raise ValueError(
            f"project={requested!r} ({path}) is not a project this worker runs: allowed are {_listed(allowed)} "
            f"(the worker's {PROJECT_ROOT_ENV} or working directory, and {ALLOWED_PROJECTS_ENV}, "
            f"{os.pathsep!r}-separated)"
        )
    return project_root(str(path))


def workspace_roots(root: Path) -> list[Path]:
    """The folders a run's workspace may go into: ``XDISTILL_WORKSPACE_ROOTS``, else the project's parent folder."""
    return _env_paths(WORKSPACE_ROOTS_ENV) or [root.resolve().parent]


def allowed_workspace_parent(requested: str | None, root: Path) -> Path:
    """The folder the run's workspace goes into: ``requested`` when it resolves inside a workspace root; by
    default the project's parent folder (the first workspace root when that is not one)."""
    roots = workspace_roots(root)
    if requested is None:
        beside = root.resolve().parent
        return beside if _inside(beside, roots) else roots[0]
    path = Path(requested).expanduser().resolve()
    if not _inside(path, roots):
        raise ValueError(
            f"workspace_parent={requested!r} resolves to {path}, outside the workspace roots this worker allows: "
            f"{_listed(roots)} (the project's parent folder, or {WORKSPACE_ROOTS_ENV}, {os.pathsep!r}-separated)"
        )
    if not path.is_dir():
        raise ValueError(f"workspace_parent={requested!r}: {path} is not a folder")
    return path


def allowed_resume_from(requested: str, root: Path) -> Path:
    """The workspace ``resume_from`` names, symlinks resolved: a folder inside a workspace root that
    :func:`prepare_workspace` made (it holds ``.git/xdistill-workspace``); anything else is refused."""
    roots = workspace_roots(root)
    path = Path(requested).expanduser().resolve()
    if not _inside(path, roots) or path in roots:
        raise ValueError(
            f"resume_from={requested!r} resolves to {path}, not a workspace inside the workspace roots this "
            f"worker allows: {_listed(roots)} (the project's parent folder, or {WORKSPACE_ROOTS_ENV})"
        )
    marker = path / WORKSPACE_MARKER
    if marker.is_symlink() or not marker.is_file():
        raise ValueError(
            f"resume_from={requested!r}: {path} is not the workspace of a distill run (it lacks {WORKSPACE_MARKER}); "
            "give the folder an interrupted run left behind, as its warning names it"
        )
    return path


def experiment_name(requested: str | None) -> str:
    """A git-ref-safe DVC experiment name: the requested one, else from the Prefect run's name."""
    name = requested or f"prefect-{flow_run.get_name() or 'run'}-{(flow_run.get_id() or '')[:6]}"
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "prefect-run"


def experiment_refs(root: Path) -> dict[str, str]:
    """``{ref: commit}`` of the DVC experiments stored in the project (``refs/exps/<baseline>/<name>``)."""
    lines = run_checked(["git", "for-each-ref", "--format=%(refname) %(objectname)", "refs/exps"], root)
    return dict(line.split(" ", 1) for line in lines.splitlines() if line.count("/") >= 4)


def existing_experiments(root: Path) -> set[str]:
    """Names of the DVC experiments stored in the project."""
    return {ref.rsplit("/", 1)[-1] for ref in experiment_refs(root)}


def check_new_experiment(root: Path, name: str) -> None:
    """Refuse an experiment name the project (or the experiments' git remote) already holds: a run never saves
    over another's experiment."""
    if name in existing_experiments(root):
        raise ValueError(f"DVC experiment '{name}' already exists in {root}: choose another name")
    remote = experiment_remote(root)
    if remote and name in {ref.rsplit("/", 1)[-1] for ref in remote_experiment_refs(remote, root)}:
        raise ValueError(f"DVC experiment '{name}' already exists on {remote}: choose another name")


@task(retries=2, retry_delay_seconds=5, retry_condition_fn=retry_unless_refused, task_run_name="prepare-workspace")
def prepare_workspace(root: str, name: str, workspace_parent: str | None = None) -> str:
    """Clone the project's last commit into a private workspace sharing the project's DVC cache."""
    project = Path(root)
    parent = allowed_workspace_parent(workspace_parent, project)
    workspace = parent / f".{project.name}-exp-{name}"
    if workspace.exists():  # a killed run's workspace: its checkpoints may be all that is left of hours
        raise ValueError(
            f"{workspace} exists (left by an interrupted run named '{name}'): start this run under "
            f"another experiment name, with resume_from={workspace} to continue its training, "
            "or delete the folder"
        )
    log = get_run_logger()
    if run_checked(["git", "status", "--porcelain", "--untracked-files=no"], project):
        log.warning("%s has uncommitted changes: the run uses the last commit only", project)
    run_checked(["git", "clone", "--quiet", str(project), str(workspace)], parent)
    try:
        # what makes this folder a valid resume_from of a later run (allowed_resume_from)
        (workspace / WORKSPACE_MARKER).write_text(json.dumps({"project": str(project), "experiment": name}) + "\n")
        if experiment_remote(project) and (project / ".dvc" / "config.local").is_file():
            # the DVC remote (flows/services.py checkout writes it there): the experiment's data is pushed to it
            shutil.copy(project / ".dvc" / "config.local", workspace / ".dvc" / "config.local")
        cache = run_checked(dvc_cmd("cache", "dir"), project)
        run_checked(dvc_cmd("cache", "dir", "--local", cache), workspace)
        # committed outputs come from the shared cache; missing ones come from the run cache or are rebuilt
        subprocess.run(dvc_cmd("checkout", "--quiet"), cwd=workspace, env=tool_env(), capture_output=True, check=False)
        if forgotten := forget_unrestorable_lock_entries(workspace):
            log.info(
                "dvc.lock entries whose outputs this DVC cache lacks (built elsewhere), left to the run cache: %s",
                ", ".join(forgotten),
            )
        commit = run_checked(["git", "rev-parse", "--short", "HEAD"], workspace)
    except BaseException:
        shutil.rmtree(workspace, ignore_errors=True)  # a half-made clone of this attempt; a retry makes a new one
        raise
    log.info("workspace %s (commit %s, DVC cache %s)", workspace, commit, cache)
    return str(workspace)


@task(task_run_name="seed-checkpoints")
def seed_checkpoints(workspace: str, previous: str) -> list[str]:
    """Copy an interrupted run's training checkpoints into this run's workspace (:func:`copy_checkpoints`)."""
    names = copy_checkpoints(Path(previous), Path(workspace))
    get_run_logger().info("training checkpoints %s copied from %s", ", ".join(names), previous)
    return names


def training_checkpoints(workspace: Path) -> list[Path]:
    """The training checkpoints (``*.pt``) a run's workspace holds, sorted."""
    from xdistill.training.settings import OutputPaths

    return sorted((workspace / OutputPaths().checkpoint_dir).glob("*.pt"))


def checkpoint_stamps(workspace: Path) -> dict[str, int]:
    """Each training checkpoint's name and modification time (ns): which ones a run wrote itself."""
    return {path.name: path.stat().st_mtime_ns for path in training_checkpoints(workspace)}


def copy_checkpoints(previous: Path, workspace: Path) -> list[str]:
    """Copy the training checkpoints of workspace ``previous`` into ``workspace``; return their names.

    The train stage keeps ``data/checkpoints`` across runs (``persist`` in dvc.yaml) and resumes from
    ``last.pt`` only when the checkpoint's fingerprint (settings, data, teacher) matches its own, so
    seeding is safe: the trainer deletes checkpoints of other settings instead of training on them.
    """
    from xdistill.training.settings import OutputPaths

    relative = OutputPaths().checkpoint_dir
    source = previous / relative
    if source.is_symlink() or not source.resolve().is_relative_to(previous.resolve()):
        raise ValueError(f"resume_from: {source} leads out of {previous} (a symlink): its files are not copied")
    checkpoints = training_checkpoints(previous)
    if linked := [path.name for path in checkpoints if path.is_symlink() or not path.is_file()]:
        raise ValueError(f"resume_from: {', '.join(linked)} in {source} are not plain files (symlinks?): not copied")
    if not checkpoints:
        raise ValueError(
            f"resume_from: {source} holds no training checkpoint (*.pt); "
            "give the workspace folder of the interrupted run"
        )
    target = workspace / relative
    target.mkdir(parents=True, exist_ok=True)
    for checkpoint in checkpoints:
        shutil.copy2(checkpoint, target / checkpoint.name, follow_symlinks=False)
    return [c.name for c in checkpoints]


def forget_unrestorable_lock_entries(workspace: Path) -> list[str]:
    """Drop the workspace's dvc.lock entries whose outputs are not in the DVC cache; return their stages.

    When a stage's deps and params match its dvc.lock entry, DVC restores exactly the outputs that
    entry names and, if the cache lacks them (the lock was committed from another machine), runs the
    stage again without looking in its run cache (``StageCache.restore`` in dvc/stage/cache.py, DVC 3).
    Without the entry the stage counts as changed and DVC looks its deps and params up in the run
    cache, which holds every result this machine computed: an ablation variant's ``baselines`` (the
    same reference models on the same data) is then checked out in a second instead of recomputed.
    """
    from dvc.repo import Repo

    lock_file = workspace / "dvc.lock"
    if not lock_file.is_file():
        return []
    with Repo(str(workspace)) as repo:
        # a stage with no lock entry has no output hashes and counts as not cached: popping it is a no-op
        lacking = sorted(
            stage.name for stage in repo.index.stages if stage.cmd and stage.outs and not stage.outs_cached()
        )
    lock = yaml.safe_load(lock_file.read_text(encoding="utf-8"))
    forgotten = [name for name in lacking if lock.get("stages", {}).pop(name, None) is not None]
    if forgotten:
        write_text_atomic(lock_file, yaml.safe_dump(lock, sort_keys=False))
    return forgotten


@task(task_run_name="set-params")
def set_params(workspace: str, values: dict[str, Any], profile: str | None = None) -> dict[str, Any]:
    """Apply ``profile`` (profiles/<name>.yaml of the workspace's commit), then write the run's values, into the
    workspace's params.yaml; return the params the run uses."""
    params_file = Path(workspace) / "params.yaml"
    log = get_run_logger()
    if profile:
        applied = apply_profile(params_file, profile)
        log.info("profile %s: %s", profile, ", ".join(f"{key}={json.dumps(value)}" for key, value in applied.items()))
    if values:
        write_params(params_file, values)
        log.info("params set: %s", ", ".join(f"{key}={json.dumps(value)}" for key, value in values.items()))
    else:
        log.info("params.yaml as committed (no parameter set)")
    params = yaml.safe_load(params_file.read_text(encoding="utf-8"))
    check_stage_params(params, params_file)
    return params


@task(retries=2, retry_delay_seconds=5, retry_condition_fn=retry_unless_refused, task_run_name="push-experiment")
def push_experiment(workspace: str, root: str, name: str) -> str:
    """``dvc exp push <project> <name>``: the experiment's git ref into the project (the cache is shared); with
    ``XDISTILL_EXP_REMOTE``, ``dvc exp push <remote> <name>``: the ref to that git remote, its data to the DVC remote.

    Never over another experiment of that name (pushed by a concurrent run since this one checked the name);
    a retry after a push that went through finds its own ref there and pushes nothing."""
    ws = Path(workspace)
    remote = experiment_remote(Path(root))
    baseline = run_checked(["git", "rev-parse", "HEAD"], ws)
    ref = f"refs/exps/{baseline[:2]}/{baseline[2:]}/{name}"
    ours = run_checked(["git", "rev-parse", ref], ws)
    stored = remote_experiment_refs(remote, Path(root)) if remote else experiment_refs(Path(root))
    there = {other: rev for other, rev in stored.items() if other.rsplit("/", 1)[-1] == name}
    if not there:
        run_checked(
            dvc_cmd("exp", "push", remote, name) if remote else dvc_cmd("exp", "push", "--no-cache", root, name), ws
        )
    elif there != {ref: ours}:
        raise ValueError(
            f"DVC experiment '{name}' appeared in {remote or root} while this run trained (another run of that "
            "name) and is not overwritten: run again under another experiment name (resume_from this "
            "run's workspace reuses its training)"
        )
    if remote:
        rev = remote_experiment_refs(remote, Path(root)).get(ref, "")
        if rev != ours:
            raise RuntimeError(
                f"dvc exp push {remote} {name}: the remote holds {rev or 'no'} commit for {ref}, not {ours}"
            )
        get_run_logger().info(
            "DVC experiment '%s' (%s) and its data pushed to %s: `dvc exp pull %s %s` brings it to any host",
            name,
            rev[:7],
            remote,
            remote,
            name,
        )
        return rev
    rev = run_checked(["git", "rev-parse", ref], Path(root))
    get_run_logger().info(
        "DVC experiment '%s' (%s) saved in %s: `dvc exp show` lists it, `dvc exp apply %s` restores it",
        name,
        rev[:7],
        root,
        name,
    )
    return rev


def release_workspace(workspace: Path, saved: bool, seeded: dict[str, int], keep_workspace: bool) -> None:
    """Delete the run's workspace at its end, unless asked to keep it or the run ended unsaved after writing
    training checkpoints of its own (``seeded``: the :func:`checkpoint_stamps` it started with)."""
    # a cancel (SIGTERM from the UI or the worker), Ctrl-C or a failure after training: the checkpoints it
    # wrote may hold hours of work, and resume_from needs this folder
    trained_unsaved = not saved and bool(checkpoint_stamps(workspace).items() - seeded.items())
    if trained_unsaved and not keep_workspace:
        get_run_logger().warning(
            "run not saved: workspace %s kept with its training checkpoints; run again under another "
            "experiment name with resume_from=%s to continue, or delete the folder",
            workspace,
            workspace,
        )
    elif not keep_workspace:
        shutil.rmtree(workspace, ignore_errors=True)
