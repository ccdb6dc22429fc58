"""One quality member through the ``distill`` Prefect flow (flows/distill.py), its results exported.

The DVC pipeline runs in a private workspace with the member's ``-S`` overrides, is saved as a DVC
experiment in the project, logged and registered in MLflow, then put through the promotion gate; the
experiment's metrics and facts about its exported student land in ``bench/results/quality/<member>/``.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.machine import machine_summary
from bench.quality.config import member_overrides
from bench.quality.results import export_experiment, write_json
from flows.workspace import PROJECT_ROOT_ENV


@contextmanager
def worker_of(project: Path) -> Iterator[None]:
    """This process runs the flow as the worker of ``project`` (the flow runs only its worker's own project)."""
    before = os.environ.get(PROJECT_ROOT_ENV)
    os.environ[PROJECT_ROOT_ENV] = str(project)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(PROJECT_ROOT_ENV, None)
        else:
            os.environ[PROJECT_ROOT_ENV] = before


def run_member(
    project: Path, config: dict[str, Any], member: dict[str, Any], results: Path, resume: bool = True
) -> dict[str, Any]:
    """One member through the distill flow; returns the flow's result plus what was exported.

    With ``resume``, a workspace that an interrupted run of the same member left behind (its process
    killed, e.g. at the end of a working session) seeds this run's training checkpoints, so the
    training goes on from its last checkpoint (the trainer checks that the settings are the same).
    """
    from flows.distill import distill

    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M")
    experiment = f"{member['name']}-{stamp}"
    workspace = project.parent / f".{project.name}-exp-{experiment}"  # where distill puts it
    # (a leftover of this very name would be wiped by the flow's clone before its checkpoints are read)
    interrupted = [w for w in interrupted_workspaces(project, member["name"]) if w != workspace] if resume else []
    if interrupted:
        print(f"{member['name']}: resuming the training checkpoints of {interrupted[-1]}", flush=True)
    started = time.monotonic()
    try:
        with worker_of(project):
            outcome = distill(
                overrides=member_overrides(config, member),
                experiment=experiment,
                project=str(project),
                keep_workspace=True,
                **({"resume_from": str(interrupted[-1])} if interrupted else {}),
            )
        for leftover in interrupted:  # their checkpoints served this run; only a finished run deletes them
            shutil.rmtree(leftover, ignore_errors=True)
        wall = time.monotonic() - started
        out = results / member["name"]
        export_experiment(workspace, out)
        facts = student_facts(workspace / "models" / "student", workspace / "data" / "raw")
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
    run_info = {
        "member": member,
        "experiment": experiment,
        "flow_result": outcome,
        "wall_seconds": round(wall),
        "student": facts,
        "machine": machine_summary(),
        "date": stamp,
        "command": f"python -m bench.quality run --members {member['name']}",
    }
    write_json(out / "run.json", run_info)
    return run_info


def interrupted_workspaces(project: Path, name: str) -> list[Path]:
    """Workspaces of earlier runs of member ``name`` that hold training checkpoints, oldest first.

    A finished run removes its workspace, so one that is left (``.<project>-exp-<name>-<stamp>``)
    belongs to a run whose process was killed. The stamp is matched exactly: member ``a`` never
    picks up the workspace of member ``a-1200``.
    """
    from xdistill.training.checkpoint import LAST
    from xdistill.training.settings import OutputPaths

    pattern = re.compile(rf"\.{re.escape(project.name)}-exp-{re.escape(name)}-\d{{8}}-\d{{4}}")
    checkpoint = OutputPaths().checkpoint_dir / LAST  # where the train stage writes it (as the flow copies it)
    # every match shares the prefix up to the stamp, so the name order is the time order
    return sorted(
        path for path in project.parent.iterdir() if pattern.fullmatch(path.name) and (path / checkpoint).is_file()
    )


def student_facts(student_dir: Path, raw_dir: Path) -> dict[str, Any]:
    """Dimension, parameters, size on disk and CPU encoding speed of an exported student (xdistill.models.facts)."""
    from xdistill.models.facts import SPEED_FILE, speed_sentences
    from xdistill.models.facts import student_facts as measure

    return measure(student_dir, speed_sentences(raw_dir / SPEED_FILE.relative_to("data/raw")))
