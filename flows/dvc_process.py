"""The DVC child process of a run: ``dvc exp run`` started in the workspace and followed as it prints.

Its output is read as it comes (:class:`DvcRun`): each stage DVC runs or skips becomes a task run
``stage-<name>`` holding that stage's log (:func:`follow_stage`), and a progress artifact shows how
far the pipeline and the training are (:class:`PipelineProgress`). A failing stage fails its task
with the stage's own error lines (:class:`StageFailed`). The short tool commands of the other
tasks (git, ``dvc cache dir`` ...) run through :func:`run_checked`.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE

from xdistill.registry.store import REGISTRY_ROOT_ENV

PROGRESS_LOG_INTERVAL_S = 5.0
PROGRESS_ARTIFACT_INTERVAL_S = 2.0
ERROR_TAIL_LINES = 15
STOP_TIMEOUT_S = 20.0

# What DVC prints when it starts a stage (logger.info in dvc/stage/run.py, dvc/stage/__init__.py,
# dvc/stage/cache.py) and when the experiment is done (dvc/repo/experiments/__init__.py).
DVC_STAGE_LINE = re.compile(
    r"^(?:Running stage '(?P<ran>[^']+)':"
    r"|Stage '(?P<skipped>[^']+)' (?:didn't change, skipping|is cached - skipping run, checking out outputs))$"
)
DVC_DONE_LINE = re.compile(r"^Ran experiment\(s\): ")
# The trainer's progress line (xdistill.training.loop): "step 40/120  loss ...".
TRAIN_STEP = re.compile(r"\bstep (\d+)/(\d+)\b")


class StageFailed(RuntimeError):
    """A DVC stage exited with an error; the message carries the stage's own error lines."""


class ExperimentFailed(RuntimeError):
    """``dvc exp run`` failed outside any stage (bad params.yaml, dvc.yaml, a locked workspace)."""


def tool_env(**extra: str) -> dict[str, str]:
    """Environment for child processes: this interpreter's bin first, every tool offline."""
    from xdistill.env import child_env

    return child_env(**extra)


def run_checked(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run a short tool command; raise with its output when it fails."""
    proc = subprocess.run(cmd, cwd=cwd, env=env or tool_env(), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()}")
    return proc.stdout.strip()


def dvc_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "dvc", *args]


def stage_env(root: Path, workspace: Path) -> dict[str, str]:
    """What the stages get besides ``dvc exp run``'s own variables: the project's store, the experiment's code."""
    return {
        REGISTRY_ROOT_ENV: str(root),
        # the stages run the experiment's own code, not whatever the installed checkout holds
        "PYTHONPATH": os.pathsep.join(filter(None, [str(workspace / "src"), os.environ.get("PYTHONPATH")])),
        # stage output reaches the task log as it is printed, in order
        "PYTHONUNBUFFERED": "1",
    }


def _split_output(stream: Any) -> Iterator[tuple[str, bool]]:
    """Lines of a byte stream, split on \\n and \\r; the flag is True for \\r-ended (progress) lines."""
    buffer = b""
    while chunk := stream.read1(4096) if hasattr(stream, "read1") else stream.read(4096):
        buffer += chunk
        while match := re.search(rb"[\r\n]", buffer):
            end = match.start()
            yield buffer[:end].decode("utf-8", "replace"), buffer[end : end + 1] == b"\r"
            buffer = buffer[end + 1 :]
    if buffer:
        yield buffer.decode("utf-8", "replace"), False


def stage_error(lines: list[str]) -> str:
    """The stage's own error message: its ``error:`` lines, else the tail of its output."""
    errors = [line.strip() for line in lines if line.lstrip().startswith("error:")]
    if errors:
        return " | ".join(dict.fromkeys(errors))
    return " | ".join(line.strip() for line in lines[-ERROR_TAIL_LINES:])


class DvcRun:
    """A running ``dvc exp run`` whose merged output is read section by section.

    A section is what DVC prints between one stage line (:data:`DVC_STAGE_LINE`) and the next, so
    each stage's own output lands in that stage's section. The process gets its own session, so
    :meth:`stop` ends DVC and the stage it runs together.
    """

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            dvc_cmd(*args), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
        )
        self._lines = _split_output(self.proc.stdout)
        self.next_stage: str | None = None  # the stage whose section comes next
        self.header = ""  # DVC's line that started it ("Running stage 'x':", "Stage 'x' didn't change...")
        self.lines: list[str] = []  # DVC's own lines outside the stages' sections

    def section(self) -> Iterator[tuple[str, bool]]:
        """Lines up to the next stage line (then ``next_stage`` names that stage) or the end."""
        self.next_stage = None
        for line, is_progress in self._lines:
            if match := DVC_STAGE_LINE.match(line.strip()):
                self.next_stage = match["ran"] or match["skipped"]
                self.header = line.strip()
                return
            if DVC_DONE_LINE.match(line.strip()):  # the experiment is saved: the rest is DVC's summary
                self.lines += [line, *(rest for rest, _ in self._lines)]
                return
            yield line, is_progress

    def wait(self) -> int:
        return self.proc.wait()

    def stop(self) -> None:
        """End DVC and its stage if they still run (the flow was cancelled or failed).

        SIGINT first: the stage gets KeyboardInterrupt and runs its own cleanup (the register stage takes
        back a model version it registered; a default SIGTERM would end it on the spot), and DVC, which
        ignores SIGINT while a stage runs, ends after it. SIGTERM, then SIGKILL, for what lingers.
        """
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
            if self.proc.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):  # the group ended meanwhile
                os.killpg(self.proc.pid, signum)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=STOP_TIMEOUT_S)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class PipelineProgress:
    """A progress artifact on the flow run: stages finished out of all, plus the training's steps."""

    def __init__(self, stages: list[str]) -> None:
        self.stages = stages
        self.done = 0
        self.last_update = 0.0
        self.artifact_id = create_progress_artifact(
            progress=0.0, key="pipeline-progress", description=f"{len(stages)} DVC stages: {', '.join(stages)}"
        )

    def stage_started(self, stage: str, skipped: bool) -> None:
        verb = "checking (up to date or in DVC's run cache)" if skipped else "running"
        self._update(0.0, f"stage {self.done + 1} of {len(self.stages)}: {stage}, {verb}", force=True)

    def stage_line(self, stage: str, line: str) -> None:
        """Count the training's steps from its progress lines."""
        if stage == "train" and (match := TRAIN_STEP.search(line)):
            step, total = int(match[1]), int(match[2])
            self._update(
                step / max(total, 1), f"stage {self.done + 1} of {len(self.stages)}: train, step {step}/{total}"
            )

    def stage_finished(self, stage: str) -> None:
        self.done = min(self.done + 1, len(self.stages))
        what = "every stage done" if self.done == len(self.stages) else f"{stage} done"
        self._update(0.0, f"{self.done} of {len(self.stages)} stages: {what}", force=True)

    def stage_failed(self, stage: str) -> None:
        self._update(0.0, f"stage {self.done + 1} of {len(self.stages)}: {stage} failed", force=True)

    def _update(self, stage_fraction: float, description: str, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last_update < PROGRESS_ARTIFACT_INTERVAL_S:
            return
        self.last_update = now
        progress = 100.0 * (self.done + stage_fraction) / max(len(self.stages), 1)
        update_progress_artifact(self.artifact_id, progress=progress, description=description)


# The flow runs the pipeline up to the registration and holds the promotion gate itself (its `promote` field,
# the project's lock and promote section), so the pipeline's own last stage, `promote`, is left out.
LAST_FLOW_STAGE = "register"
PROMOTE_STAGE = "promote"


def run_experiment(workspace: Path, root: Path, name: str) -> dict[str, dict[str, Any]]:
    """``dvc exp run --name <name>`` in the workspace, each stage it runs or skips followed as a task;
    returns each stage's :func:`follow_stage` outcome, in the order DVC took them."""
    log = get_run_logger()
    stages = [s for s in run_checked(dvc_cmd("stage", "list", "--name-only"), workspace).split() if s != PROMOTE_STAGE]
    progress = PipelineProgress(stages)
    env = tool_env(**stage_env(root, workspace))
    dvc_run = DvcRun(["exp", "run", "--name", name, LAST_FLOW_STAGE], workspace, env)
    outcomes: dict[str, dict[str, Any]] = {}
    try:
        for line, _ in dvc_run.section():  # DVC's own lines before the first stage
            if line.strip():
                dvc_run.lines.append(line)
                log.info("[dvc] %s", line)
        while dvc_run.next_stage is not None:
            stage = dvc_run.next_stage
            outcomes[stage] = follow_stage(dvc_run, stage, progress)
        if dvc_run.wait() != 0:
            raise ExperimentFailed(f"dvc exp run failed: {stage_error(dvc_run.lines)}")
    finally:
        dvc_run.stop()
    for line in dvc_run.lines[-3:]:
        log.info("[dvc] %s", line)
    return outcomes


@task(task_run_name="stage-{stage}", cache_policy=NO_CACHE)
def follow_stage(dvc_run: DvcRun, stage: str, progress: PipelineProgress) -> dict[str, Any]:
    """One DVC stage of the experiment: its output into this task's log; fails when the stage fails.

    Returns ``{"ran": bool, "seconds": float}``: whether DVC ran the command (False: up to date or
    restored from its run cache) and how long the stage took, for the run's result and the sweep."""
    log = get_run_logger()
    log.info("%s", dvc_run.header)
    skipped = dvc_run.header.startswith("Stage ")
    progress.stage_started(stage, skipped)
    started = time.monotonic()
    lines: list[str] = []
    last_progress_log = 0.0
    for line, is_progress in dvc_run.section():
        if not line.strip():
            continue
        lines.append(line)
        progress.stage_line(stage, line)
        now = time.monotonic()
        # progress bars redraw with \r many times a second: log one every few seconds
        if not is_progress or now - last_progress_log >= PROGRESS_LOG_INTERVAL_S:
            log.info("[%s] %s", stage, line)
            last_progress_log = now if is_progress else last_progress_log
    if dvc_run.next_stage is None and dvc_run.wait() != 0:
        message = f"stage '{stage}' failed: {stage_error(lines)}"
        log.error("%s", message)
        progress.stage_failed(stage)
        raise StageFailed(message)
    progress.stage_finished(stage)
    seconds = time.monotonic() - started
    log.info("stage %s done in %.1f s", stage, seconds)
    return {"ran": not skipped, "seconds": round(seconds, 1)}
