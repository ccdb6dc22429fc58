"""The whole DVC pipeline, end to end, on a tiny copy of the project (real DVC, models, MLflow).

One workspace walks through what a user does: the first ``dvc repro`` runs every stage; a second
one does nothing; a ``train.*`` change re-runs only train, evaluate and register (no data stage,
no teacher embedding); the trained student loads with ``SentenceTransformer`` and the registered
one with ``mlflow.sentence_transformers``; a 128-d student (Dense head + feature distillation)
goes through the same stages.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml

from testbed.pipeline_project import make_pipeline_project, pipeline_stages, run
from xdistill.registry.register import read_registration

ALL_STAGES = pipeline_stages()
SENTENCES = ["The cat sits on the mat.", "Die Katze sitzt auf der Matte.", "El gato está en la alfombra."]

pytestmark = pytest.mark.slow


def stages_run(stdout: str) -> list[str]:
    return re.findall(r"Running stage '([^']+)'", stdout)


def set_params(project: Path, **sections: dict) -> None:
    params = yaml.safe_load((project / "params.yaml").read_text(encoding="utf-8"))
    for section, values in sections.items():
        for dotted, value in values.items():
            node = params[section]
            *parents, leaf = dotted.split(".")
            for key in parents:
                node = node[key]
            node[leaf] = value
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, mirror_dir: Path) -> Path:
    return make_pipeline_project(tmp_path_factory.mktemp("pipeline") / "project", mirror_dir)


@dataclass(frozen=True)
class FirstRepro:
    """The first ``dvc repro``: its output, and a copy of what it wrote taken before any test changed the
    project (tests that change params re-run the pipeline in the same project, in any order)."""

    stdout: str
    outputs: Path  # metrics/, reports/, plots/, models/student/ as the first repro left them


@pytest.fixture(scope="module")
def first_repro(project: Path) -> FirstRepro:
    stdout = run(["dvc", "repro"], project).stdout
    outputs = project.parent / "first-repro"
    for folder in ("metrics", "reports", "plots"):
        shutil.copytree(project / folder, outputs / folder)
    # outputs are replaced, never rewritten in place: hard links are a safe, instant copy of the student
    shutil.copytree(project / "models/student", outputs / "models/student", copy_function=os.link)
    return FirstRepro(stdout, outputs)


def test_first_repro_runs_every_stage_and_writes_every_output(first_repro: FirstRepro) -> None:
    assert stages_run(first_repro.stdout) == ALL_STAGES
    summary = read_json(first_repro.outputs / "metrics/eval/summary.json")
    assert set(summary["models"]) == {"student", "student-start", "student-untrained", "teacher"}
    students = {label: scores for label, scores in summary["models"].items() if label != "teacher"}
    for label, scores in students.items():
        assert 0 < scores["tatoeba_average"] <= 100, label
    # the English-only teacher is scored on the English sets alone: no primary score, no translation benchmark
    teacher = summary["models"]["teacher"]
    assert teacher["primary_score"] is None and teacher.get("tatoeba_average") is None
    assert 0 < teacher["per_language"]["en"] <= 100 and teacher["sts_monolingual_average"] is not None
    # teacher-space retrieval: the untrained student is not in the teacher's space, the fitted head puts it there
    models = summary["models"]
    assert models["student-untrained"]["teacher_space_flores_accuracy"] < 5
    # (the default Procrustes head on this 2-layer tiny student: 7.2 % against the untrained one's < 1 %)
    assert (
        models["student-start"]["teacher_space_flores_accuracy"]
        > models["student-untrained"]["teacher_space_flores_accuracy"] + 3
    )
    assert 0 <= models["student"]["teacher_space_flores_min"] <= models["student"]["teacher_space_flores_accuracy"]
    train = read_json(first_repro.outputs / "metrics/train.json")
    assert train["steps"] == 6 and train["interpolation"]["alpha"] in (0.0, 0.5, 1.0)
    # the exported student is the chosen interpolation rotated onto the teacher's space (train.export_rotation,
    # on in params.yaml) and measured again: closer to the teacher on the pairs the rotation was fitted on, the
    # same student-student cosines. On this tiny run's 24 dev pairs the fitted rotation may generalise a little
    # worse (0.3799 vs 0.3785 once), so dev MSE is held to 2 % of the chosen student's, not below it.
    chosen = train["interpolation"]["by_alpha"][f"{train['interpolation']['alpha']:g}"]
    rotation = train["export_rotation"]
    assert rotation["mse_after"] <= rotation["mse_before"]
    assert train["exported"]["dev_mse_x100"] <= chosen["dev_mse_x100"] * 1.02
    assert train["exported"]["dev_sts"] == pytest.approx(chosen["dev_sts"], abs=0.5)
    assert {"dev_sts_en-en", "dev_sts_de-en", "dev_teacher_accuracy"} <= set(train["start"])
    # the teacher-space adapter (train.teacher_adapter) is fitted, saved with the student and scored beside
    # the student's own output; the untrained start gets one too (what the adapter does without distillation)
    assert train["teacher_adapter"]["pairs"] > 0 and 0 <= train["teacher_adapter"]["dev_teacher_accuracy"] <= 100
    assert (first_repro.outputs / "models/student/teacher_space/config.json").is_file()
    assert (
        0
        <= models["student"]["teacher_space_adapter_flores_min"]
        <= models["student"]["teacher_space_adapter_flores_accuracy"]
        <= 100
    )
    assert "teacher_space_adapter_flores_accuracy" in models["student-start"]
    assert "teacher_space_adapter_flores_accuracy" not in models["student-untrained"]
    for png in ["plots/data_report.png", "plots/train_curves.png", "plots/eval/sts17.png", "plots/eval/tatoeba.png"]:
        assert (first_repro.outputs / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    assert "| " in (first_repro.outputs / "reports/data_report.md").read_text(encoding="utf-8")


def test_second_repro_does_nothing(project: Path, first_repro: FirstRepro) -> None:
    again = run(["dvc", "repro"], project)
    assert stages_run(again.stdout) == []
    assert run(["dvc", "status"], project).stdout.strip().endswith("Data and pipelines are up to date.")
    # the metrics DVC shows are the few headline scores, readable in a terminal (every score stays in
    # metrics/eval and metrics/train.json, versioned in git)
    scores = read_json(first_repro.outputs / "metrics/scores.json")
    summary = read_json(first_repro.outputs / "metrics/eval/summary.json")
    assert scores["primary"] == pytest.approx(summary["primary_score"])
    untrained = summary["models"]["student-untrained"]["primary_score"]
    assert scores["gain"] == pytest.approx(summary["primary_score"] - untrained)
    shown = run(["dvc", "metrics", "show"], project).stdout
    assert "metrics/scores.json" in shown and "primary" in shown
    assert max(len(line) for line in shown.splitlines()) < 400, shown


def test_trained_student_loads_locally_and_from_the_registry(project: Path, first_repro: FirstRepro) -> None:
    import mlflow
    from sentence_transformers import SentenceTransformer

    local = SentenceTransformer(str(first_repro.outputs / "models/student"), device="cpu")
    local_vectors = local.encode(SENTENCES, normalize_embeddings=True)
    assert local_vectors.shape == (3, 384)

    assert read_json(first_repro.outputs / "metrics/register.json")["tracking_uri"] == "sqlite:///mlflow.db"
    registered = read_registration(first_repro.outputs / "metrics/register.json", project)
    # the main job ends with the gate's decision on the registered version (the champion when it passed)
    promotion = read_json(first_repro.outputs / "metrics/promotion.json")
    assert promotion["candidate"] == registered["model_version"] and promotion["reasons"]
    assert promotion["decision"] in ("promoted", "refused")
    assert promotion["champion"] == (registered["model_version"] if promotion["decision"] == "promoted" else None)
    mlflow.set_tracking_uri(registered["tracking_uri"])
    mlflow.set_registry_uri(registered["tracking_uri"])  # not one another test of this process set
    loaded = mlflow.sentence_transformers.load_model(registered["model_uri"])
    np.testing.assert_allclose(loaded.encode(SENTENCES, normalize_embeddings=True), local_vectors, atol=1e-5)
    run_data = mlflow.get_run(registered["run_id"]).data
    summary = read_json(first_repro.outputs / "metrics/eval/summary.json")
    assert run_data.metrics["eval.summary.primary_score"] == pytest.approx(summary["primary_score"])
    # the version carries the references the gate judges it against: the untrained student and its teacher
    from xdistill.registry.scores import Scores
    from xdistill.registry.store import client_for

    version = client_for(registered["tracking_uri"]).get_model_version(
        registered["model_name"], registered["model_version"]
    )
    scores = Scores.from_tags(version.tags)
    assert set(scores.references) == {"student-untrained", "teacher"}
    assert scores.references["student-untrained"].primary == pytest.approx(
        summary["models"]["student-untrained"]["primary_score"]
    )
    # the English-only teacher's reference: its English score, which the gate compares, and no primary score
    assert math.isnan(scores.references["teacher"].primary)
    teacher_en = summary["models"]["teacher"]["per_language"]["en"]
    assert scores.references["teacher"].per_language["en"] == pytest.approx(teacher_en)


def test_train_param_change_reruns_only_train_evaluate_register(project: Path, first_repro: FirstRepro) -> None:
    set_params(project, train={"steps": 4})
    rerun = run(["dvc", "repro"], project)
    # the starting student does not change with the step count: its adapter and evaluation are not redone
    assert stages_run(rerun.stdout) == ["train", "evaluate", "register", "promote"]
    assert read_json(project / "metrics/train.json")["steps"] == 4


def test_low_dimensional_student_runs_through_the_same_pipeline(project: Path, first_repro: FirstRepro) -> None:
    """LEALLA-style: a 128-d Dense head trained by feature distillation through a projection."""
    from sentence_transformers import SentenceTransformer

    set_params(
        project,
        train={
            "student.output_dim": 128,
            "student.align_to_teacher": False,
            "loss.mse": 0.0,
            "loss.feature_distillation": 1.0,
        },
    )
    rerun = run(["dvc", "repro"], project)
    # a new student and new loss weights compute no teacher embedding and re-read no data; the new
    # head makes a new starting student
    assert stages_run(rerun.stdout) == ["train", "start_adapter", "evaluate_start", "evaluate", "register", "promote"]
    student = SentenceTransformer(str(project / "models/student"), device="cpu")
    assert student.encode(SENTENCES).shape == (3, 128)
    summary = read_json(project / "metrics/eval/summary.json")
    assert 0 < summary["models"]["student"]["tatoeba_average"] <= 100
    assert summary["models"]["student"]["sts17_crosslingual_average"] == pytest.approx(
        summary["sts17_crosslingual_average"]
    )
