"""The register stage against crashes, and what a registration leaves in MLflow for people to read.

Real MLflow (sqlite store in a temp folder), a real but tiny sentence-transformers student (a 1-layer,
32-wide BERT on the all-MiniLM-L6-v2 tokenizer: 4 MB instead of 90) and a real process killed with SIGKILL.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from registry_helpers import MODEL_NAME, make_outputs_project, student_source

from xdistill.errors import XdistillError
from xdistill.registry.pending import (
    HOST_TAG,
    PENDING,
    PID_TAG,
    PROCESS_START_TAG,
    STALE_AFTER_S,
    STARTED_AT_TAG,
    STATE_TAG,
    clean_stale_registrations,
    logged_model_id,
    owner_tags,
)
from xdistill.registry.promotion import promote
from xdistill.registry.register import REGISTER_FILE, SCORES_ARTIFACT, model_folder, register_run
from xdistill.registry.scores import Scores
from xdistill.registry.store import REGISTRY_ROOT_ENV, client_for, default_artifact_location, resolve_tracking_uri

TINY_DIM = 32


def _tiny_student(folder: Path) -> None:
    """A real sentence-transformers folder, small enough to log in a second."""
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import AutoTokenizer, BertConfig, BertModel

    tokenizer = AutoTokenizer.from_pretrained(str(student_source()))
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=TINY_DIM,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    hf = folder.parent / "tiny-hf"
    BertModel(config).save_pretrained(str(hf))
    tokenizer.save_pretrained(str(hf))
    modules = [models.Transformer(str(hf), max_seq_length=64), models.Pooling(TINY_DIM, "mean")]
    SentenceTransformer(modules=modules, device="cpu").save(str(folder))


def _tiny_project(root: Path, adapter: bool = False) -> Path:
    """The register stage's inputs with the tiny student, a training history and the parallel data."""
    import shutil

    make_outputs_project(root, 0.42, {"de": 0.5, "es": 0.4}, git=False)
    student = root / "models" / "student"
    shutil.rmtree(student)
    _tiny_student(student)
    if adapter:
        from xdistill.adapter.model import TeacherSpaceAdapter, save_adapter

        save_adapter(TeacherSpaceAdapter(TINY_DIM, 16, 8, teacher="pypi:all-minilm-l6-v2"), student, {"pairs": 3})
    train_json = json.loads((root / "metrics" / "train.json").read_text())
    train_json.update({"best": {"dev_score": 61.5}, "best_step": 20})
    (root / "metrics" / "train.json").write_text(json.dumps(train_json))
    (root / "reports" / "train_history.csv").write_text(
        "step,kind,dev_score,loss,lr\n0,dev,40.0,,\n10,train,,0.5,1e-05\n20,train,,0.25,2e-05\n20,dev,61.5,,\n",
        encoding="utf-8",
    )
    for name in ("train.tsv.gz", "dev.tsv.gz"):
        path = root / "data" / "parallel" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            handle.write(f"source\ttranslation\tlang\tcorpus\nHello.\tHallo.\tde\t{name}\n")
    return root


def _runs(uri: str) -> list:
    from mlflow.entities import ViewType

    client = client_for(uri)
    experiment = client.get_experiment_by_name("xdistill")
    return list(client.search_runs([experiment.experiment_id], run_view_type=ViewType.ALL))


def _artifact_dir(location: str) -> Path:
    from urllib.parse import unquote, urlparse

    return Path(unquote(urlparse(location).path))


# Runs the register stage and stops it for good between the version's creation and register.json:
# the test SIGKILLs it there. The production code has no hook for this.
_STALLED_REGISTER = """
import sys, time
from pathlib import Path
import xdistill.registry.register as register
marker, write = Path(sys.argv[2]), register.write_json_atomic
def stall(path, data, *args, **kwargs):
    if Path(path).name == "register.json":
        marker.write_text("version created")
        time.sleep(600)
    return write(path, data, *args, **kwargs)
register.write_json_atomic = stall
register.register_run(Path(sys.argv[1]))
"""


@pytest.mark.slow
def test_a_sigkilled_registration_is_never_judged_and_the_next_one_cleans_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _tiny_project(tmp_path / "project")
    uri = resolve_tracking_uri("sqlite:///mlflow.db", root)
    monkeypatch.chdir(root)
    monkeypatch.delenv(REGISTRY_ROOT_ENV, raising=False)
    marker = tmp_path / "version-created"
    env = {key: value for key, value in os.environ.items() if key != REGISTRY_ROOT_ENV}
    proc = subprocess.Popen(
        [sys.executable, "-c", _STALLED_REGISTER, str(root), str(marker)],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while not marker.exists():
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline, "the registration never reached its version"
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)

    client = client_for(uri)
    (orphan,) = client.search_model_versions(f"name = '{MODEL_NAME}'")
    assert orphan.tags[STATE_TAG] == PENDING and not (root / REGISTER_FILE).exists()
    (crashed_run,) = _runs(uri)
    assert crashed_run.info.status == "RUNNING"
    logged = client.get_logged_model(logged_model_id(orphan))
    assert any(_artifact_dir(logged.artifact_location).rglob("model.safetensors"))
    # nothing promote would judge
    with pytest.raises(XdistillError, match="no completed versions"):
        promote(MODEL_NAME, tracking_uri=uri)
    with pytest.raises(XdistillError, match="has not completed"):
        promote(MODEL_NAME, orphan.version, tracking_uri=uri)

    registration = register_run(root)

    versions = client.search_model_versions(f"name = '{MODEL_NAME}'")
    assert [str(v.version) for v in versions] == [registration.model_version] != [str(orphan.version)]
    assert versions[0].tags[STATE_TAG] == "complete"
    assert not _artifact_dir(logged.artifact_location).exists()  # the crashed student's files are gone
    runs = {run.info.run_id: run for run in _runs(uri)}
    assert all(run.info.status != "RUNNING" for run in runs.values())
    assert runs[crashed_run.info.run_id].info.status == "FAILED"
    assert runs[crashed_run.info.run_id].info.lifecycle_stage == "deleted"
    assert not _artifact_dir(crashed_run.info.artifact_uri).exists()
    assert promote(MODEL_NAME, tracking_uri=uri).candidate == registration.model_version


def _pending_version(uri: str, tags: dict[str, str]) -> str:
    from mlflow.exceptions import MlflowException

    client = client_for(uri)
    experiment = client.get_experiment_by_name("xdistill")
    experiment_id = (
        experiment.experiment_id
        if experiment
        else client.create_experiment("xdistill", artifact_location=default_artifact_location(uri))
    )
    run = client.create_run(experiment_id, tags={**tags, "xdistill.role": "register"})
    try:
        client.create_registered_model(MODEL_NAME)
    except MlflowException:
        pass
    source = client.get_run(run.info.run_id).info.artifact_uri
    version = client.create_model_version(MODEL_NAME, source, run_id=run.info.run_id, tags={**tags, STATE_TAG: PENDING})
    return str(version.version)


def test_a_live_registration_is_never_cleaned_a_dead_one_is(tmp_path: Path) -> None:
    """Same host: the owner's pid decides (a reused pid is told apart by its start time); another host:
    only an age past STALE_AFTER_S, since its processes cannot be seen."""
    import psutil

    uri = resolve_tracking_uri("sqlite:///mlflow.db", tmp_path)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_start = psutil.Process(dead.pid).create_time()
    dead.wait()
    me = owner_tags()
    old = f"{time.time() - STALE_AFTER_S - 60:.3f}"
    live = _pending_version(uri, me)
    reused_pid = _pending_version(uri, {**me, PROCESS_START_TAG: f"{float(me[PROCESS_START_TAG]) - 3600:.3f}"})
    dead_pid = _pending_version(uri, {**me, PID_TAG: str(dead.pid), PROCESS_START_TAG: f"{dead_start:.3f}"})
    remote_recent = _pending_version(uri, {**me, HOST_TAG: "another-host.invalid"})
    remote_old = _pending_version(uri, {**me, HOST_TAG: "another-host.invalid", STARTED_AT_TAG: old})
    assert socket.gethostname() != "another-host.invalid"

    client = client_for(uri)
    experiment_id = client.get_experiment_by_name("xdistill").experiment_id
    cleaned = clean_stale_registrations(client, MODEL_NAME, experiment_id)
    assert sorted(cleaned) == sorted(f"{MODEL_NAME} version {v}" for v in (reused_pid, dead_pid, remote_old))
    left = sorted(str(v.version) for v in client.search_model_versions(f"name = '{MODEL_NAME}'"))
    assert left == sorted([live, remote_recent])
    running = {run.info.run_id for run in client.search_runs([experiment_id], "attributes.status = 'RUNNING'")}
    assert running == {client.get_model_version(MODEL_NAME, v).run_id for v in (live, remote_recent)}


def test_an_exception_mid_registration_deletes_its_logged_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlflow

    import xdistill.registry.register as register

    root = _tiny_project(tmp_path / "project")
    uri = resolve_tracking_uri("sqlite:///mlflow.db", root)
    monkeypatch.chdir(root)
    monkeypatch.delenv(REGISTRY_ROOT_ENV, raising=False)
    logged: list[Path] = []
    log_student = register._log_student

    def recording(client, *args, **kwargs):
        uri_and_id = log_student(client, *args, **kwargs)
        logged.append(_artifact_dir(client.get_logged_model(uri_and_id[1]).artifact_location))
        return uri_and_id

    def unreachable(*_args, **_kwargs):
        raise RuntimeError("registry unreachable")

    monkeypatch.setattr(register, "_log_student", recording)
    monkeypatch.setattr(mlflow, "register_model", unreachable)
    with pytest.raises(RuntimeError, match="registry unreachable"):
        register_run(root)

    (model_files,) = logged
    assert model_files.name == "artifacts" and not model_files.exists()  # the student's files are gone
    (run,) = _runs(uri)
    assert (run.info.status, run.info.lifecycle_stage) == ("FAILED", "deleted")
    assert not _artifact_dir(run.info.artifact_uri).exists()
    assert not (root / REGISTER_FILE).exists()


def test_the_champion_carries_the_adapter_and_the_run_reads_in_the_ui(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlflow
    import numpy as np

    from xdistill.adapter.model import load_adapter

    root = _tiny_project(tmp_path / "project", adapter=True)
    uri = resolve_tracking_uri("sqlite:///mlflow.db", root)
    monkeypatch.chdir(root)
    monkeypatch.delenv(REGISTRY_ROOT_ENV, raising=False)
    registration = register_run(root)
    assert promote(MODEL_NAME, tracking_uri=uri).decision == "promoted"

    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    downloaded = mlflow.artifacts.download_artifacts(f"models:/{MODEL_NAME}@champion", dst_path=str(tmp_path / "dl"))
    adapter, config = load_adapter(model_folder(downloaded))
    original, _ = load_adapter(root / "models" / "student")
    assert config["teacher"] == "pypi:all-minilm-l6-v2" and config["fit"] == {"pairs": 3}
    vectors = np.random.default_rng(0).standard_normal((3, TINY_DIM)).astype(np.float32)
    np.testing.assert_array_equal(adapter.map(vectors), original.map(vectors))
    assert mlflow.sentence_transformers.load_model(f"models:/{MODEL_NAME}@champion").encode(["Hallo"]).shape == (
        1,
        TINY_DIM,
    )

    client = client_for(uri)
    version = client.get_model_version(MODEL_NAME, registration.model_version)
    # short tag values, each readable in full; the scores still come back whole
    assert all(len(value) <= 250 and not value.startswith(("{", "[")) for value in version.tags.values())
    scores = Scores.from_tags(version.tags)
    assert scores.per_language == {"de": 0.5, "es": 0.4} and scores.references["teacher"].primary == 0.21
    assert version.tags["xdistill.score.de"] == "0.5"
    for text in (version.description, client.get_registered_model(MODEL_NAME).description):
        assert "all-minilm-l6-v2" in text and "multilingual-e5-small" in text
    assert "primary score: **0.42**" in version.description and "dev score (checkpoint selection): 61.50" in (
        version.description
    )
    run = client.get_run(registration.run_id)
    assert run.data.tags["mlflow.note.content"] == version.description
    assert run.data.params["train.steps"] == "3"
    history = client.get_metric_history(registration.run_id, "train/loss")
    assert [(m.step, m.value) for m in history] == [(10, 0.5), (20, 0.25)]
    assert [m.step for m in client.get_metric_history(registration.run_id, "train/dev_score")] == [0, 20]
    inputs = {d.dataset.name: d for d in run.inputs.dataset_inputs}
    train = root / "data" / "parallel" / "train.tsv.gz"
    assert inputs["train.tsv.gz"].dataset.digest == hashlib.md5(train.read_bytes()).hexdigest()[:36]
    assert {tag.value for tag in inputs["train.tsv.gz"].tags} >= {"training"}
    assert {tag.value for tag in inputs["dev.tsv.gz"].tags} >= {"validation"}
    scores_file = Path(client.download_artifacts(registration.run_id, SCORES_ARTIFACT, str(tmp_path)))
    assert json.loads(scores_file.read_text())["per_language"] == {"de": 0.5, "es": 0.4}
