"""params.yaml written as the stages read it (xdistill.params_file): values set by dotted key with the
file's comments and style kept, and refusals (an unknown key, a value of another kind) that name the file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from ruamel.yaml import YAML

from xdistill.params_file import check_stage_params, write_params

COMMENTED = (
    "languages: [ar]   # targets\nmodels: {teacher: x, student: y}\n"
    "train:\n  learning_rate: 5.0e-5   # AdamW peak\n  patience: 3\n  loss: {mse: 1.0}\n"
    "corpora:\n  mirror: ../shared/corpora\n"
)


def test_params_are_written_as_the_stages_read_them_with_comments_kept(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text(COMMENTED, encoding="utf-8")
    write_params(
        params,
        {
            "languages": ["de", "es"],
            "models.teacher": "pypi:all-minilm-l6-v2",
            "train.learning_rate": 1e-05,
            "train.patience": None,
            "train.loss.mse": 0.5,
            "corpora.mirror": "/data/it's here",
        },
    )
    text = params.read_text(encoding="utf-8")
    assert yaml.safe_load(text) == {  # PyYAML, the stages' reader: 1e-05 is a float, not a string
        "languages": ["de", "es"],
        "models": {"teacher": "pypi:all-minilm-l6-v2", "student": "y"},
        "train": {"learning_rate": 1e-05, "patience": None, "loss": {"mse": 0.5}},
        "corpora": {"mirror": "/data/it's here"},
    }
    assert re.search(r"^languages: \[de, es\] +# targets$", text, re.M) and "# AdamW peak" in text
    assert YAML(typ="safe").load(text) == yaml.safe_load(text)  # DVC's reader reads the same


def test_a_dotted_key_sets_only_its_own_setting_in_the_files_style(tmp_path: Path) -> None:
    """Flow-style mappings stay flow style; a text with a colon is quoted (DVC's parser needs it in a flow
    mapping); a float keeps its dot, which YAML 1.1 needs to read it as a float."""
    params = tmp_path / "params.yaml"
    params.write_text(COMMENTED, encoding="utf-8")
    write_params(
        params, {"models.teacher": "pypi:all-minilm-l6-v2", "train.loss.mse": 0.5, "train.learning_rate": 1e-05}
    )
    lines = params.read_text(encoding="utf-8").splitlines()
    assert 'models: {teacher: "pypi:all-minilm-l6-v2", student: y}' in lines
    assert "  loss: {mse: 0.5}" in lines
    assert re.fullmatch(r"  learning_rate: 1\.0e-05 +# AdamW peak", lines[3])
    untouched = COMMENTED.splitlines()
    assert [lines[0], lines[2], lines[4], *lines[6:]] == [untouched[0], untouched[2], untouched[4], *untouched[6:]]


def test_an_unknown_key_is_refused_with_the_file_named_and_the_file_is_left_as_it_was(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text(COMMENTED, encoding="utf-8")
    with pytest.raises(
        ValueError,
        match=rf"^{re.escape(str(params))}: unknown parameter 'train.lerning_rate' "
        r"\(keys there: learning_rate, loss, patience\)$",
    ):
        write_params(params, {"train.lerning_rate": 1.0})
    with pytest.raises(ValueError, match="no section 'evaluation' for the parameter 'evaluation.muse'"):
        write_params(params, {"evaluation.muse": False})
    with pytest.raises(ValueError, match="no section 'corpora.mirror' for the parameter 'corpora.mirror.path'"):
        write_params(params, {"corpora.mirror.path": "/data"})  # a setting is not a section
    assert params.read_text(encoding="utf-8") == COMMENTED


def test_a_value_of_another_kind_than_the_setting_it_replaces_is_refused(tmp_path: Path) -> None:
    """ "3e-5" reads back as the text it is and would fail only in the train stage, maybe hours in."""
    params = tmp_path / "params.yaml"
    params.write_text("train:\n  learning_rate: 5.0e-5\n  steps: 100\n  max: null\n  flag: true\n", encoding="utf-8")
    with pytest.raises(
        ValueError,
        match=rf"^{re.escape(str(params))}: train.learning_rate is a number \(5e-05\), "
        r"not a text \('3e-5'\)$",
    ):
        write_params(params, {"train.learning_rate": "3e-5"})
    with pytest.raises(ValueError, match="train.flag is true/false"):
        write_params(params, {"train.flag": 1})
    write_params(params, {"train.learning_rate": 1, "train.steps": 2.5, "train.max": 7})
    assert yaml.safe_load(params.read_text(encoding="utf-8"))["train"] == {
        "learning_rate": 1,
        "steps": 2.5,
        "max": 7,
        "flag": True,
    }


def test_every_stage_setting_is_checked_before_the_run_starts(tmp_path: Path, repo_root: Path) -> None:
    committed = yaml.safe_load((repo_root / "params.yaml").read_text(encoding="utf-8"))
    check_stage_params(committed, tmp_path / "params.yaml")
    refused = {
        "every loss weight is 0": {"train": {**committed["train"], "loss": {"mse": 0.0}}},
        "not a multiple of grad_accumulation": {
            "train": {**committed["train"], "batch_size": 30, "grad_accumulation": 4}
        },
        "a micro-batch holds 1 pair": {"train": {**committed["train"], "batch_size": 4, "grad_accumulation": 4}},
        "head_fit must be one of": {
            "train": {**committed["train"], "student": {**committed["train"]["student"], "head_fit": "svd"}}
        },
        "margin": {"promote": {**committed["promote"], "margin": -1}},
        "evaluate.mining_k must be >= 1": {"evaluate": {**committed["evaluate"], "mining_k": 0}},
        # the hostile-user probes: each was accepted, or failed only after the data and model were loaded
        "train.weight_decay must be >= 0, got -0.1": {"train": {**committed["train"], "weight_decay": -0.1}},
        "train.learning_rate must be > 0, got 0": {"train": {**committed["train"], "learning_rate": 0}},
        "train.learning_rate must be > 0, got -1e-05": {"train": {**committed["train"], "learning_rate": -1e-5}},
        "train.learning_rate: Input should be a finite number": {
            "train": {**committed["train"], "learning_rate": float("nan")}
        },
        "train.collapse_threshold must be < 1, got 5": {"train": {**committed["train"], "collapse_threshold": 5}},
        "train.steps: expected a number, got the boolean true": {"train": {**committed["train"], "steps": True}},
        "train.device must be one of": {"train": {**committed["train"], "device": "gpu0"}},
        "teacher_embed.device: unknown device 'gpu0'": {
            "teacher_embed": {**committed["teacher_embed"], "device": "gpu0"}
        },
        "train.student.lora.dropout must be < 1, got 1.0": {
            "train": {**committed["train"], "student": {**committed["train"]["student"], "lora": {"dropout": 1.0}}}
        },
        "parallel.cleaning.lid_min_confidence must be <= 1, got 2": {
            "parallel": {
                **committed["parallel"],
                "cleaning": {**committed["parallel"]["cleaning"], "lid_min_confidence": 2},
            }
        },
    }
    for message, change in refused.items():
        with pytest.raises(ValueError, match=rf"params.yaml: .*{re.escape(message)}"):
            check_stage_params({**committed, **change}, tmp_path / "params.yaml")
