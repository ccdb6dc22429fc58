"""BUCC file reader (good and malformed files), the FLORES-200 BUCC-style builder and the
end-to-end evaluator with a real encoder."""

from __future__ import annotations

from pathlib import Path

import pytest

from xdistill.errors import InputFileError, XdistillError
from xdistill.mining.bucc import bucc_paths, evaluate_bitext_mining, read_bucc_split
from xdistill.mining.flores import build_flores_bucc, flores_file, read_flores


def write_bucc(folder: Path, language: str, split: str, xx: str, en: str, gold: str) -> None:
    paths = bucc_paths(folder, language, split)
    paths["xx"].write_text(xx, encoding="utf-8")
    paths["en"].write_text(en, encoding="utf-8")
    paths["gold"].write_text(gold, encoding="utf-8")


GOOD = {
    "xx": "de-1\tDer Hund schläft.\nde-2\tEs regnet.\n",
    "en": "en-7\tThe dog sleeps.\nen-8\tThe cat eats.\n\nen-9\tIt rains.\n",
    "gold": "de-1\ten-7\nde-2\ten-9\n",
}


def test_reader_reads_the_official_layout(tmp_path):
    write_bucc(tmp_path, "de", "train", GOOD["xx"], GOOD["en"], GOOD["gold"])
    split = read_bucc_split(tmp_path, "de", "train")
    assert (tmp_path / "de-en.train.de").is_file() and (tmp_path / "de-en.train.gold").is_file()
    assert split.xx_ids == ["de-1", "de-2"] and split.xx_sentences == ["Der Hund schläft.", "Es regnet."]
    assert split.en_ids == ["en-7", "en-8", "en-9"]  # the blank line is skipped
    assert split.gold == {("de-1", "en-7"), ("de-2", "en-9")}


@pytest.mark.parametrize(
    ("side", "content", "line", "problem"),
    [
        ("xx", "de-1\tDer Hund schläft.\nde-2 Es regnet.\n", 2, "expected 'id<TAB>sentence', found 1"),
        ("xx", "de-1\tDer Hund\tschläft.\n", 1, "found 3 tab-separated"),
        ("xx", "de-1\tDer Hund schläft.\nde-1\tEs regnet.\n", 2, "duplicate sentence id 'de-1'"),
        ("en", "en-7\tThe dog sleeps.\nen-9\t \n", 2, "empty sentence for id 'en-9'"),
        ("en", "\tThe dog sleeps.\n", 1, "empty sentence id"),
        ("gold", "de-1\ten-7\nde-2\n", 2, "expected 'xx_id<TAB>en_id'"),
        ("gold", "de-1\ten-7\nde-3\ten-9\n", 2, "gold id 'de-3' is not in the non-English"),
        ("gold", "de-1\ten-6\n", 1, "gold id 'en-6' is not in the English"),
    ],
)
def test_reader_names_file_line_and_problem(tmp_path, side, content, line, problem):
    files = dict(GOOD, **{side: content})
    write_bucc(tmp_path, "de", "test", files["xx"], files["en"], files["gold"])
    with pytest.raises(InputFileError) as caught:
        read_bucc_split(tmp_path, "de", "test")
    suffix = {"xx": "de", "en": "en", "gold": "gold"}[side]
    assert caught.value.path == tmp_path / f"de-en.test.{suffix}"
    assert caught.value.line == line
    assert problem in str(caught.value)
    assert f"de-en.test.{suffix}:{line}:" in str(caught.value)


@pytest.mark.parametrize(
    ("side", "content", "problem"),
    [
        ("gold", "", "no gold pairs"),
        ("gold", "\n\n", "no gold pairs"),
        ("xx", "", "no sentences"),
        ("en", "\n", "no sentences"),
    ],
)
def test_reader_refuses_a_file_without_content(tmp_path, side, content, problem):
    # an empty file scored F1 0 without a word (an empty sentence file fails the gold ids, unless gold is empty too)
    files = dict(GOOD, **{side: content}, **({"gold": ""} if side != "gold" else {}))
    write_bucc(tmp_path, "de", "train", files["xx"], files["en"], files["gold"])
    suffix = {"xx": "de", "en": "en", "gold": "gold"}[side]
    with pytest.raises(InputFileError, match=problem) as caught:
        read_bucc_split(tmp_path, "de", "train")
    assert caught.value.path == tmp_path / f"de-en.train.{suffix}"


def test_reader_missing_file(tmp_path):
    with pytest.raises(InputFileError, match="file not found"):
        read_bucc_split(tmp_path, "fr", "train")


# --- FLORES-200 BUCC-style benchmark -------------------------------------------------------------


@pytest.fixture(scope="module")
def flores_dir(mirror_dir) -> Path:
    return mirror_dir / "eval" / "flores200-devtest"


@pytest.fixture(scope="module")
def flores_benchmark(flores_dir, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("flores") / "bucc"
    manifest = build_flores_bucc(flores_dir, out, ["de", "zh", "qq", "en"], seed=7)
    return out, manifest


def test_flores_builder_layout_sizes_and_gold_share(flores_benchmark):
    out, manifest = flores_benchmark
    assert set(manifest["languages"]) == {"de", "zh"}
    assert "qq.devtest" in manifest["skipped"]["qq"] and "English" in manifest["skipped"]["en"]
    for split in ("train", "test"):
        data = read_bucc_split(out, "de", split)  # the BUCC reader runs on the built files
        assert len(data.gold) == 13
        assert len(data.xx_ids) == len(data.en_ids) == 259
        assert 0.03 <= len(data.gold) / len(data.xx_ids) <= 0.07  # "a few percent" parallel
    assert (out / "MANIFEST.json").is_file()


def test_flores_gold_pairs_are_translations_and_fillers_have_none(flores_benchmark, flores_dir):
    out, _ = flores_benchmark
    german = read_flores(flores_file(flores_dir, "de"))
    english = read_flores(flores_file(flores_dir, "en"))
    line_of_de = {s: i for i, s in enumerate(german)}
    line_of_en = {s: i for i, s in enumerate(english)}
    lines_per_split = {}
    for split in ("train", "test"):
        data = read_bucc_split(out, "de", split)
        de_line = {i: line_of_de[s] for i, s in zip(data.xx_ids, data.xx_sentences)}
        en_line = {i: line_of_en[s] for i, s in zip(data.en_ids, data.en_sentences)}
        assert all(de_line[x] == en_line[e] for x, e in data.gold)
        gold_lines = {de_line[x] for x, _ in data.gold}
        # every non-gold sentence's translation is absent from the other side
        assert set(de_line.values()) & set(en_line.values()) == gold_lines
        lines_per_split[split] = set(de_line.values()) | set(en_line.values())
    assert not lines_per_split["train"] & lines_per_split["test"]


def test_flores_builder_is_deterministic(flores_benchmark, flores_dir, tmp_path):
    out, _ = flores_benchmark
    again = tmp_path / "again"
    build_flores_bucc(flores_dir, again, ["de", "zh", "qq", "en"], seed=7)
    for path in sorted(out.iterdir()):
        assert (again / path.name).read_bytes() == path.read_bytes(), path.name
    other = tmp_path / "other"
    build_flores_bucc(flores_dir, other, ["de"], seed=8)
    assert (other / "de-en.test.gold").read_bytes() != (out / "de-en.test.gold").read_bytes()


def test_a_language_the_builder_left_out_keeps_the_builders_reason(flores_benchmark, tmp_path):
    out, manifest = flores_benchmark
    result = evaluate_bitext_mining(None, out, ["qq"])  # nothing to mine: no encoder needed
    assert result["skipped"]["qq"] == manifest["skipped"]["qq"]  # no FLORES file, not "missing file(s)"
    (tmp_path / "MANIFEST.json").write_text("[]", encoding="utf-8")  # someone else's manifest: not the builder's
    assert "missing file(s)" in evaluate_bitext_mining(None, tmp_path, ["qq"])["skipped"]["qq"]


def test_flores_builder_missing_english(tmp_path):
    with pytest.raises(XdistillError, match="eng_Latn.devtest"):
        build_flores_bucc(tmp_path, tmp_path / "out", ["de"])
    assert not (tmp_path / "out").exists()


# --- the evaluator with a real encoder ---------------------------------------------------------


@pytest.fixture(scope="module")
def minilm():
    from xdistill.models import load_encoder

    return load_encoder("pypi:all-minilm-l6-v2", device="cpu")


def write_hidden_copies(folder: Path, splits: tuple[str, str] = ("train", "test")) -> None:
    """A tiny benchmark whose 'xx' side holds exact copies of the gold English sentences."""
    fillers_xx = [
        "Bananas are rich in potassium.",
        "The train leaves at noon.",
        "He plays the violin.",
        "Volcanoes can erupt without warning.",
        "My grandmother knits scarves.",
    ]
    fillers_en = [
        "Quantum computers use qubits.",
        "The museum opens on Sundays.",
        "Rain fell all night.",
        "Penguins live in the southern hemisphere.",
        "She painted the fence blue.",
    ]
    gold_sentences = {
        splits[0]: ["The cat sleeps on the sofa.", "Stock markets fell sharply today."],
        splits[1]: ["A new bridge was built over the river.", "Children love chocolate cake."],
    }
    for split, gold in gold_sentences.items():
        xx = [*gold, *fillers_xx]
        en = [*fillers_en, *gold]
        write_bucc(
            folder,
            "xx",
            split,
            "".join(f"x{i}\t{s}\n" for i, s in enumerate(xx)),
            "".join(f"e{i}\t{s}\n" for i, s in enumerate(en)),
            "".join(f"x{i}\te{len(fillers_en) + i}\n" for i in range(len(gold))),
        )


def test_evaluate_bitext_mining_finds_hidden_copies(minilm, tmp_path):
    """A working pipeline must find every hidden copy and nothing else (F1 1.0 on train and test)."""
    write_hidden_copies(tmp_path)
    result = evaluate_bitext_mining(minilm, tmp_path, ["xx", "yy"], k=2, batch_size=8)
    metrics = result["languages"]["xx"]
    assert (metrics["precision"], metrics["recall"], metrics["f1"]) == (1.0, 1.0, 1.0)
    assert metrics["train_f1"] == 1.0 and metrics["n_predicted"] == 2
    assert result["average"]["f1"] == 1.0
    assert "missing file" in result["skipped"]["yy"]
    assert result["settings"] == {
        "k": 2,
        "margin": "ratio",
        "retrieval": "max",
        "tune_split": "train",
        "test_split": "test",
    }


def test_the_official_release_tunes_on_sample_and_scores_training(minilm, tmp_path):
    """BUCC 2017/2018 as released: {xx}-en.sample.* and {xx}-en.training.* (no public test gold)."""
    write_hidden_copies(tmp_path, ("sample", "training"))
    result = evaluate_bitext_mining(minilm, tmp_path, ["xx"], k=2, batch_size=8)
    assert result["languages"]["xx"]["f1"] == 1.0 and result["skipped"] == {}
    assert (result["settings"]["tune_split"], result["settings"]["test_split"]) == ("sample", "training")


def test_repeated_sentences_are_mined_once_and_stand_for_every_id(minilm):
    """LASER's --unify: two copies of a sentence on each side are one text pair, given to all four id pairs
    (as rows of their own they filled each other's k-NN lists and one-to-one kept only one of them)."""
    from xdistill.mining.bucc import BuccSplit, mine_split

    xx = ["The cat sleeps on the sofa.", "The cat sleeps on the sofa.", "Rain fell all night.", "He plays the violin."]
    en = [
        "Rain fell all night.",
        "The cat sleeps on the sofa.",
        "The museum opens on Sundays.",
        "The cat sleeps on the sofa.",
    ]
    split = BuccSplit("xx", "test", ["x0", "x1", "x2", "x3"], xx, ["e0", "e1", "e2", "e3"], en, set())
    pairs = mine_split(minilm, split, k=2, margin="ratio", retrieval="max", batch_size=8)
    mined = {(int(s), int(t)): float(v) for s, t, v in zip(pairs.src, pairs.tgt, pairs.scores)}
    assert {(0, 1), (0, 3), (1, 1), (1, 3), (2, 0)} <= set(mined)
    assert len({mined[pair] for pair in ((0, 1), (0, 3), (1, 1), (1, 3))}) == 1  # one text pair, one score


def test_a_folder_mixing_layouts_is_refused_before_anything_is_encoded(tmp_path):
    write_hidden_copies(tmp_path)  # xx: train/test
    for split in ("sample", "training"):
        for side in ("yy", "en", "gold"):
            (tmp_path / f"yy-en.{split}.{side}").write_text("", encoding="utf-8")
    with pytest.raises(XdistillError, match=r"mixes split layouts"):
        evaluate_bitext_mining(None, tmp_path, ["xx", "yy"])  # no encoder: nothing may be encoded first


def test_an_empty_file_is_refused_before_anything_is_encoded(tmp_path):
    write_hidden_copies(tmp_path)
    (tmp_path / "xx-en.test.gold").write_text("", encoding="utf-8")
    with pytest.raises(InputFileError, match=r"xx-en.test.gold: no gold pairs"):
        evaluate_bitext_mining(None, tmp_path, ["xx"])  # no encoder: the train split may not be encoded first


def test_a_bucc_dir_without_files_of_the_languages_is_an_error(tmp_path, mirror_dir):
    from xdistill.errors import XdistillError
    from xdistill.evaluation.evaluator import EvaluationContext
    from xdistill.evaluation.mining_evaluator import MiningEvaluator
    from xdistill.evaluation.settings import EvaluationInputs, EvaluationSettings

    write_hidden_copies(tmp_path, ("sample", "training"))  # "xx" only, the run asks for de
    settings = EvaluationSettings.from_params({"benchmarks": ["mining"]}, ["de"])
    context = EvaluationContext(settings, EvaluationInputs(eval_dir=mirror_dir / "eval", bucc_dir=tmp_path))
    with pytest.raises(
        XdistillError,
        match=r"evaluate.bucc_dir holds no BUCC files of the configured languages "
        r"\(de: missing file",
    ):
        MiningEvaluator()(None, context)
