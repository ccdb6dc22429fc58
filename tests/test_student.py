"""Student construction: layer truncation, frozen embeddings, Dense head, export, trainable state."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer

from tests.trainer_helpers import minilm_folder
from xdistill.errors import XdistillError
from xdistill.training.student import (
    StudentConfig,
    build_student,
    kept_layer_indices,
    load_trainable_state_dict,
    save_student,
    trainable_state_dict,
    transformer_backbone,
)

SENTENCES = ["The cat sits on the mat.", "Der Hund schläft.", "A completely different sentence about taxes."]


@pytest.fixture(scope="module")
def base() -> str:
    return minilm_folder()


def test_keep_layers_freeze_and_dense_head(base: str) -> None:
    student = build_student(StudentConfig(base, keep_layers=2, output_dim=16, max_seq_length=40), seed=3)
    backbone = transformer_backbone(student)
    assert len(backbone.encoder.layer) == 2 and backbone.config.num_hidden_layers == 2
    assert not backbone.get_input_embeddings().weight.requires_grad
    assert backbone.embeddings.position_embeddings.weight.requires_grad
    names = [type(m).__name__ for m in student]
    assert names == ["Transformer", "Pooling", "Dense", "Normalize"]
    embeddings = student.encode(SENTENCES)
    assert embeddings.shape == (3, 16)
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-5)
    # the Dense init depends on the seed only, not on what ran before
    torch.manual_seed(12345)
    again = build_student(StudentConfig(base, keep_layers=2, output_dim=16, max_seq_length=40), seed=3)
    np.testing.assert_array_equal(again.encode(SENTENCES), embeddings)


def test_spread_layer_selection_keeps_evenly_spaced_layers_ending_with_the_last(base: str, tmp_path: Path) -> None:
    assert kept_layer_indices(12, 6, "spread") == [1, 3, 5, 7, 9, 11]
    assert kept_layer_indices(12, 4, "spread") == [2, 5, 8, 11]
    assert kept_layer_indices(12, 6, "first") == [0, 1, 2, 3, 4, 5]
    full = SentenceTransformer(base, device="cpu")
    full_layers = transformer_backbone(full).encoder.layer
    student = build_student(StudentConfig(base, keep_layers=3, layer_selection="spread"))
    kept = transformer_backbone(student).encoder.layer
    assert len(kept) == 3 and transformer_backbone(student).config.num_hidden_layers == 3
    for position, index in enumerate([1, 3, 5]):
        for (name, tensor), reference in zip(
            kept[position].state_dict().items(), full_layers[index].state_dict().values()
        ):
            assert torch.equal(tensor, reference), (position, name)
    first = build_student(StudentConfig(base, keep_layers=3))
    assert not np.allclose(first.encode(SENTENCES), student.encode(SENTENCES), atol=1e-3)
    # all six kept: the untrained student itself
    same = build_student(StudentConfig(base, keep_layers=6, layer_selection="spread"))
    np.testing.assert_allclose(same.encode(SENTENCES), full.encode(SENTENCES), atol=1e-6)
    loaded = SentenceTransformer(str(save_student(student, tmp_path / "spread")), device="cpu")
    np.testing.assert_allclose(loaded.encode(SENTENCES), student.encode(SENTENCES), atol=1e-6)


def test_saved_student_loads_with_sentence_transformers(base: str, tmp_path: Path) -> None:
    student = build_student(StudentConfig(base, keep_layers=1, output_dim=8, max_seq_length=32))
    out = save_student(student, tmp_path / "student")
    loaded = SentenceTransformer(str(out), device="cpu")
    # max_seq_length=32 truncates training inputs only: the export embeds as long as the untrained student can
    assert loaded.get_embedding_dimension() == 8
    assert loaded.max_seq_length == SentenceTransformer(base, device="cpu").max_seq_length > 32
    assert json.loads((out / "config.json").read_text())["num_hidden_layers"] == 1
    np.testing.assert_allclose(loaded.encode(SENTENCES), student.encode(SENTENCES), atol=1e-6)


def test_export_keeps_the_base_models_prompts(base: str, tmp_path: Path) -> None:
    prompted = tmp_path / "prompted-base"
    prompted.mkdir()
    for item in Path(base).iterdir():  # link the weights, rewrite only the prompt config
        if item.name != "config_sentence_transformers.json":
            os.symlink(item, prompted / item.name)
    config = json.loads((Path(base) / "config_sentence_transformers.json").read_text())
    config.update(prompts={"query": "query: ", "document": "passage: "}, default_prompt_name="query")
    (prompted / "config_sentence_transformers.json").write_text(json.dumps(config))
    student = build_student(StudentConfig(str(prompted), keep_layers=1))
    loaded = SentenceTransformer(str(save_student(student, tmp_path / "student")), device="cpu")
    assert loaded.prompts["query"] == "query: " and loaded.default_prompt_name == "query"
    shutil.rmtree(prompted)


def test_trainable_state_dict_round_trip_skips_frozen_table(base: str) -> None:
    student = build_student(StudentConfig(base, keep_layers=1))
    state = trainable_state_dict(student)
    assert not any("word_embeddings" in name for name in state)
    assert any("encoder.layer.0" in name for name in state)
    with torch.no_grad():
        for parameter in student.parameters():
            if parameter.requires_grad:
                parameter.add_(1.0)
    load_trainable_state_dict(student, state)
    for name, tensor in trainable_state_dict(student).items():
        assert torch.equal(tensor, state[name]), name
    with pytest.raises(XdistillError, match="does not match"):
        load_trainable_state_dict(student, {"nonexistent.weight": torch.zeros(1)})


def test_bad_student_options_fail_clearly(base: str) -> None:
    with pytest.raises(XdistillError, match="keep_layers=9: the untrained student has 6 layers"):
        build_student(StudentConfig(base, keep_layers=9))
    with pytest.raises(XdistillError, match="layer_selection must be one of"):
        StudentConfig(base, keep_layers=2, layer_selection="last")
    with pytest.raises(XdistillError, match="unknown keys"):
        StudentConfig.from_params(base, {"layers": 2}, 64)
    # set elsewhere (train.max_seq_length, models.student): refused, not silently overridden
    with pytest.raises(XdistillError, match=r"params train.student: unknown keys \['max_seq_length', 'spec'\]"):
        StudentConfig.from_params(base, {"max_seq_length": 256, "spec": "other"}, 64)
