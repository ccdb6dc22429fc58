"""The Prefect flow ``distill``: one run of the DVC pipeline, saved as a DVC experiment (``sweep`` runs several).

How a run works
---------------
``distill`` never edits the project's files and never runs DVC in the project's workspace. It

1. clones the project's last commit into a private workspace beside the project that uses the
   project's DVC cache (:mod:`flows.workspace`); with ``resume_from``, an interrupted run's
   training checkpoints are copied in;
2. applies the run's profile (``profile``, e.g. ``gpu``: :func:`xdistill.profiles.apply_profile`), then
   writes the run's parameters into the workspace's params.yaml (:func:`xdistill.params_file.write_params`);
3. runs ``dvc exp run --name <experiment>`` there: DVC decides what runs (dvc.lock, its run cache),
   gives the stages ``DVC_EXP_NAME`` and commits the experiment with its metrics, plots and
   reports. Its output is read as it comes (:mod:`flows.dvc_process`): each stage DVC runs or skips
   becomes a task run ``stage-<name>`` holding that stage's log, and a progress artifact shows how
   far the pipeline and the training are;
4. ``dvc exp push <project> <experiment>`` stores the experiment in the project: ``dvc exp show``
   lists it and ``dvc exp apply <experiment>`` restores it from the shared cache;
5. links the MLflow run that the ``register`` stage wrote into the project's store
   (``XDISTILL_REGISTRY_ROOT``) on the Prefect run (link and markdown artifacts), and runs the
   promotion gate (:mod:`flows.registry_tasks`).

A failing stage fails its task and the flow with the stage's own error lines; no experiment is saved,
a model version this run registered is taken back out, and the workspace is deleted, unless the run
wrote training checkpoints (then it stays for ``resume_from``).

Why the flow writes params.yaml instead of passing ``dvc exp run -S``: DVC writes the overridden
file with a YAML 1.2 writer (``1e-05``), which the stages' reader (PyYAML, YAML 1.1) takes for the
*string* "1e-05". :func:`~xdistill.params_file.write_params` sets the values itself, keeps the
file's comments, and checks that PyYAML reads back exactly what was set. ``dvc exp run`` then
records the edited params.yaml in the experiment, as it does for any workspace change.

Flow parameters are typed (pydantic, :mod:`flows.run_form`): the Prefect UI's *Custom run* form
shows each with its description (from the docstring), offers the valid languages and models as
choices, and sends only the fields a person fills in; a field left empty keeps params.yaml's value.

GPU hosts: the ``distill/gpu`` deployment (prefect.yaml) runs the whole flow on the ``gpu`` work pool with
``profile: gpu`` and ``train_processes: auto``; which GPUs a run uses is its worker's ``CUDA_VISIBLE_DEVICES``
(docs/gpu.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from prefect import flow, get_run_logger
from pydantic import MISSING, Field

from flows.dvc_process import run_experiment
from flows.registry_tasks import (
    mlflow_run_url,
    promote_task,
    record_mlflow_run,
    report_failure,
    unregister_unsaved,
    workspace_registration,
)
from flows.results import publish_result
from flows.run_form import (
    Language,
    LossWeights,
    ModelSpec,
    ProfileName,
    TrainProcesses,
    is_set,
    mirror_from_workspace,
    run_params,
)
from flows.workspace import (
    allowed_project,
    allowed_resume_from,
    allowed_workspace_parent,
    check_new_experiment,
    checkpoint_stamps,
    experiment_name,
    prepare_workspace,
    push_experiment,
    release_workspace,
    seed_checkpoints,
    set_params,
)
from xdistill.registry.store import project_promote_section


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
    profile: ProfileName | MISSING = MISSING,
    train_processes: TrainProcesses | MISSING = MISSING,
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
        profile: Settings for a kind of machine (profiles/<name>.yaml), applied to params.yaml before
            the fields here, e.g. gpu (one datacenter GPU, bf16) or gpu-fp16 (V100, T4). Empty: none.
        train_processes: Training processes on the worker's host: auto (one per GPU the worker sees,
            1 on a CPU) or a number. Empty: params.yaml's `runtime.nproc`.
        experiment: Name of the DVC experiment (default: from this run's name).
        overrides: Any other params.yaml value by dotted key, e.g.
            {"train.learning_rate": 3e-5, "parallel.max_train_pairs": 20000}. Wins over the fields above.
        promote: Run the promotion gate on the new model version (champion alias, or the refusal reason as tags).
        project: The project checkout (default: XDISTILL_PROJECT_ROOT or the worker's working directory);
            another one only if the worker lists it in XDISTILL_ALLOWED_PROJECTS.
        workspace_parent: Where the private workspace goes (default: next to the project); a folder inside
            the project's parent folder, or inside one the worker lists in XDISTILL_WORKSPACE_ROOTS.
        keep_workspace: Keep the private workspace afterwards (debugging). A run that ends unsaved
            (cancelled, interrupted or failed) after training wrote checkpoints keeps it anyway, for resume_from.
        resume_from: The workspace folder of an interrupted run (left behind when its process was
            killed): its training checkpoints seed this run, and the training resumes from its last
            one when the settings and data are the same (otherwise it starts afresh). Only a workspace
            a distill run made, inside the folders allowed for workspace_parent.
    """
    log = get_run_logger()
    # the run's paths are the worker's to allow (flows/workspace.py): refused here, before any work
    root = allowed_project(project if is_set(project) else None)
    parent = allowed_workspace_parent(workspace_parent if is_set(workspace_parent) else None, root)
    previous = allowed_resume_from(resume_from, root) if is_set(resume_from) else None
    name = experiment_name(experiment if is_set(experiment) else None)
    check_new_experiment(root, name)
    values = run_params(
        languages, teacher, student, train_steps, loss_weights, mirror, overrides, train_processes=train_processes
    )
    workspace = prepare_workspace(str(root), name, str(parent))
    saved = started = False
    seeded: dict[str, int] = {}
    try:
        committed_registration = workspace_registration(Path(workspace), root)  # from the project's last commit, if any
        if previous is not None:
            seed_checkpoints(workspace, str(previous))
            seeded = checkpoint_stamps(Path(workspace))
        params = set_params(
            workspace, mirror_from_workspace(values, root, Path(workspace)), profile if is_set(profile) else None
        )
        started = True  # from here on the register stage may have registered a version
        stages = run_experiment(Path(workspace), root, name)
        rev = push_experiment(workspace, str(root), name)
        saved = True
        registration = record_mlflow_run(workspace, str(root), name, rev)
        result: dict[str, Any] = {
            "experiment": name,
            "experiment_rev": rev,
            "mlflow_run_id": registration["run_id"],
            "model_version": registration["model_version"],
            "mlflow_url": mlflow_run_url(registration),
            "stages": stages,
        }
        if promote:
            result["promotion"] = promote_task(
                registration["model_name"],
                registration["model_version"],
                registration["tracking_uri"],
                project_promote_section(params.get("promote"), root),
            )
        publish_result(result)  # readable from any host: the sweep's summary, when this run ran elsewhere
        log.info("distill run done: %s", json.dumps(result))
        return result
    except BaseException as exc:
        left = (
            unregister_unsaved(
                Path(workspace),
                root,
                committed_registration,
                project_promote_section(params.get("promote"), root).get("lock_file"),
            )
            if started and not saved
            else []
        )
        if isinstance(exc, Exception):
            report_failure(name, exc, saved, left)
        raise
    finally:
        release_workspace(Path(workspace), saved, seeded, keep_workspace)
