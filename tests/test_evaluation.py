"""Evaluation metrics and readers on tiny hand-computed cases, plus the real benchmark files."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from xdistill.data.sampling import evenly_spaced
from xdistill.errors import InputFileError, XdistillError
from xdistill.evaluation.bias import language_bias
from xdistill.evaluation.metrics import mean_or_nan, paired_cosine, spearman_x100
from xdistill.evaluation.report import (
    benchmark_notes,
    flatten,
    metrics_view,
    per_language_scores,
    primary_score,
    task_scores,
)
from xdistill.evaluation.settings import EvaluationSettings
from xdistill.evaluation.sts import (
    STS17_TRACKS,
    STSSet,
    build_stsb_sets,
    load_sts17,
    read_sts17_track,
    read_stsb_multi_mt,
    score_sts_set,
    scored_line_count,
)
from xdistill.evaluation.suite import project_2d
from xdistill.evaluation.tatoeba import available_codes, read_tatoeba_pairs, tatoeba_code, tatoeba_scores


def unit(*values: float) -> np.ndarray:
    vector = np.array(values, dtype=np.float64)
    return vector / np.linalg.norm(vector)


# ------------------------------------------------------------------ Spearman and cosine


def test_spearman_perfect_and_reversed_rankings():
    assert spearman_x100([0.1, 0.5, 0.9, 2.0], [1, 2, 3, 4]) == pytest.approx(100.0)
    assert spearman_x100([0.1, 0.5, 0.9, 2.0], [4, 3, 2, 1]) == pytest.approx(-100.0)


def test_spearman_with_ties_uses_average_ranks():
    # gold ranks [1, 2, 3.5, 5, 3.5] (two 7s share 3.5); centred: [-2,-1,.5,2,.5] vs [-2,-1,0,1,2]
    # sum of products 8, sums of squares 10 and 9.5 -> rho = 8 / sqrt(95)
    assert spearman_x100([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(100 * 8 / math.sqrt(95))


def test_spearman_constant_gold_is_nan_and_length_mismatch_is_an_error():
    assert math.isnan(spearman_x100([1, 2, 3], [4, 4, 4]))
    assert math.isnan(spearman_x100([1, 1, 1], [4, 4, 4]))
    with pytest.raises(XdistillError, match="3 predictions for 2 gold scores"):
        spearman_x100([1, 2, 3], [1, 2])


def test_spearman_gives_a_collapsed_model_zero_not_nan():
    # NaN would drop the set out of mean_or_nan, so the collapsed model's average over the others rises
    collapsed = spearman_x100([0.7, 0.7, 0.7], [1, 2, 3])
    assert collapsed == 0.0
    assert mean_or_nan([collapsed, 90.0]) == 45.0


def test_spearman_refuses_non_finite_predictions():
    with pytest.raises(XdistillError, match="1 of 3 predictions are not finite"):
        spearman_x100([0.1, float("nan"), 0.3], [1, 2, 3])


def test_paired_cosine_row_by_row():
    first = np.array([[1.0, 0.0], [0.0, 2.0]])
    second = np.array([[1.0, 1.0], [0.0, -1.0]])
    np.testing.assert_allclose(paired_cosine(first, second), [1 / math.sqrt(2), -1.0])


def test_mean_or_nan_ignores_missing_values():
    assert mean_or_nan([1.0, None, float("nan"), 3.0]) == 2.0
    assert math.isnan(mean_or_nan([None]))


# ------------------------------------------------------------------ STS scoring


def test_score_sts_set_on_hand_made_vectors():
    vectors = {"a": unit(1, 0), "b": unit(1, 0), "c": unit(0, 1), "d": unit(0.6, 0.8), "e": unit(1, 1)}
    embed = lambda texts: np.stack([vectors[t] for t in texts])  # noqa: E731
    # cosines: (a,b)=1, (a,c)=0, (a,d)=0.6, (c,e)=0.707
    sts_set = STSSet("toy", ["a", "a", "a", "c"], ["b", "c", "d", "e"], np.array([5.0, 0.0, 2.0, 4.0]))
    # predicted ranks [4,1,2,3] vs gold ranks [4,1,2,3]
    assert score_sts_set(embed, sts_set) == pytest.approx(100.0)
    swapped = STSSet("toy", ["a", "a", "a", "c"], ["b", "c", "d", "e"], np.array([5.0, 0.0, 4.0, 2.0]))
    # predicted ranks [4,1,2,3] vs gold [4,1,3,2]: centred products 2.25+2.25-.25-.25 = 4, / 5 -> 0.8
    assert score_sts_set(embed, swapped) == pytest.approx(80.0)


def test_evenly_spaced_subset_covers_the_whole_set():
    np.testing.assert_array_equal(evenly_spaced(10, 4), [0, 3, 6, 9])
    sts_set = STSSet("s", list("abcdefghij"), list("ABCDEFGHIJ"), np.arange(10.0))
    small = sts_set.subset(4)
    assert small.sentences1 == ["a", "d", "g", "j"] and small.sentences2 == ["A", "D", "G", "J"]
    assert sts_set.subset(None) is sts_set


def test_parallel_pairs_spread_draws_the_same_rows_as_every_other_subset():
    from xdistill.data.parallel_tsv import ParallelPairs

    pairs = ParallelPairs([f"s{i}" for i in range(10)], [f"t{i}" for i in range(10)], ["de"] * 5 + ["es"] * 5)
    spread = pairs.spread(4)
    assert spread.sources == [f"s{i}" for i in evenly_spaced(10, 4)] == ["s0", "s3", "s6", "s9"]
    assert spread.langs == ["de", "de", "es", "es"] and pairs.spread(None) is pairs
    with pytest.raises(XdistillError, match="at least one"):
        pairs.spread(0)


# ------------------------------------------------------------------ STS17 files


def test_sts17_reads_all_official_tracks(mirror_dir: Path):
    tracks = load_sts17(mirror_dir / "eval" / "sts17")
    assert [t.name for t in tracks] == list(STS17_TRACKS)
    assert all(len(t) == 250 for t in tracks)
    assert all(0 <= t.gold.min() and t.gold.max() <= 5 for t in tracks)


def test_sts17_tr_en_gold_scores_belong_to_the_first_250_lines(mirror_dir: Path):
    sts17 = mirror_dir / "eval" / "sts17"
    track = read_sts17_track(sts17, "tr-en")
    lines = (sts17 / "STS2017.eval.v1.1" / "STS.input.track6.tr-en.txt").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 500 and len(track) == 250
    assert [f"{a}\t{b}" for a, b in zip(track.sentences1, track.sentences2)] == lines[:250]
    assert any("first 250" in note for note in track.notes)
    assert scored_line_count("tr-en", 500, 250, Path("x"), Path("y")) == 250


def test_sts_input_and_gold_count_mismatch_is_reported(tmp_path: Path):
    with pytest.raises(InputFileError, match="500 input pairs but 250 gold scores in .*STS.gs.track5.en-en.txt"):
        scored_line_count(
            "en-en", 500, 250, tmp_path / "STS.input.track5.en-en.txt", tmp_path / "STS.gs.track5.en-en.txt"
        )
    inputs = tmp_path / "STS2017.eval.v1.1"
    gold = tmp_path / "STS2017.gs"
    inputs.mkdir()
    gold.mkdir()
    (inputs / "STS.input.track5.en-en.txt").write_text("a\tb\nc d\n", encoding="utf-8")
    (gold / "STS.gs.track5.en-en.txt").write_text("1.0\n2.0\n", encoding="utf-8")
    with pytest.raises(InputFileError, match=r"track5.en-en.txt:2: expected 2 tab-separated"):
        read_sts17_track(tmp_path, "en-en")


def test_sts17_track_with_fewer_than_two_scored_pairs_names_the_gold_file(tmp_path: Path):
    # Spearman refused it as "needs at least two pairs", naming no file
    (tmp_path / "STS2017.eval.v1.1").mkdir()
    (tmp_path / "STS2017.gs").mkdir()
    (tmp_path / "STS2017.eval.v1.1" / "STS.input.track5.en-en.txt").write_text("a\tb\nc\td\n", encoding="utf-8")
    gold = tmp_path / "STS2017.gs" / "STS.gs.track5.en-en.txt"
    gold.write_text("1.0\n\n", encoding="utf-8")  # the second pair is unscored
    with pytest.raises(InputFileError, match="1 scored pair.*needs at least two") as caught:
        read_sts17_track(tmp_path, "en-en")
    assert caught.value.path == gold


# ------------------------------------------------------------------ stsb-multi-mt


def test_stsb_multi_mt_reader_handles_quoted_commas(tmp_path: Path):
    path = tmp_path / "stsb-en-test.csv"
    path.write_text('"Hello, world.",Bye.,3.5\nA man,"sings, loudly",0.25\n', encoding="utf-8")
    rows = read_stsb_multi_mt(path)
    assert [(r.sentence1, r.sentence2, r.score) for r in rows] == [
        ("Hello, world.", "Bye.", 3.5),
        ("A man", "sings, loudly", 0.25),
    ]
    path.write_text("a,b,1.0\nhello, world,b,2.0\n", encoding="utf-8")
    with pytest.raises(InputFileError, match=r"stsb-en-test.csv:2: expected 3 CSV fields"):
        read_stsb_multi_mt(path)
    # a quote left open swallows the rest of the file: the error names the line it opened on
    path.write_text('a,b,1.0\n"unclosed,b,2.0\n' + "c,d,3.0\n" * 10, encoding="utf-8")
    with pytest.raises(InputFileError, match=r"stsb-en-test.csv:2: .*runs on to line 12: an unclosed quote"):
        read_stsb_multi_mt(path)
    with path.open("w", encoding="utf-8") as handle:  # past the csv module's field limit: its own error
        handle.write('a,b,1.0\n"unclosed,b,2.0\n' + "x" * 200_000 + "\n")
    with pytest.raises(InputFileError, match=r"stsb-en-test.csv:2: malformed CSV .*unclosed quote"):
        read_stsb_multi_mt(path)
    for score in ("nan", "inf", "-0.5", "5.2"):  # NaN would make the set's Spearman NaN, dropped from averages
        path.write_text(f"a,b,1.0\nc,d,{score}\n", encoding="utf-8")
        with pytest.raises(InputFileError, match=rf"stsb-en-test.csv:2: gold score {score} outside 0-5"):
            read_stsb_multi_mt(path)
    # a Latin-1 byte deep in the file (past the decoder's first block): the error names its line
    path.write_bytes(b"a,b,1.0\n" * 3000 + "caf\u00e9,b,1.0\n".encode("latin-1"))
    with pytest.raises(InputFileError, match=r"stsb-en-test.csv:3001: not valid UTF-8"):
        read_stsb_multi_mt(path)


def test_stsb_crosslingual_sets_pair_english_with_translations(mirror_dir: Path):
    folder = mirror_dir / "eval" / "stsb-multi-mt"
    english = read_stsb_multi_mt(folder / "data" / "stsb-en-test.csv")
    german = read_stsb_multi_mt(folder / "data" / "stsb-de-test.csv")
    monolingual, crosslingual = build_stsb_sets(folder, ["ar", "de"], max_pairs=5)  # no Arabic file
    assert [s.name for s in monolingual] == ["en-en", "de-de"]
    assert [s.name for s in crosslingual] == ["en-de", "de-en"]
    en_de = crosslingual[0]
    keep = evenly_spaced(len(english), 5)
    assert en_de.sentences1 == [english[i].sentence1 for i in keep]
    assert en_de.sentences2 == [german[i].sentence2 for i in keep]
    assert crosslingual[1].sentences1 == [german[i].sentence1 for i in keep]
    np.testing.assert_allclose(en_de.gold, [english[i].score for i in keep])


# ------------------------------------------------------------------ Tatoeba


def test_tatoeba_accuracy_in_both_directions():
    # xx0=(1,0) xx1=(0,1); en0=(1,0) en1 close to xx0: xx->en both right; en1->xx picks xx0: wrong
    xx = np.stack([unit(1, 0), unit(0, 1)])
    en = np.stack([unit(1, 0), unit(0.9, 0.436)])
    assert tatoeba_scores(xx, en) == pytest.approx({"xx2en": 100.0, "en2xx": 50.0, "average": 75.0})


def test_tatoeba_codes_and_files(mirror_dir: Path):
    folder = mirror_dir / "eval" / "tatoeba-laser"
    assert tatoeba_code("zh") == "cmn" and tatoeba_code("de") == "deu" and tatoeba_code("kab") == "kab"
    codes = available_codes(folder)
    assert len(codes) == 112 and "cmn" in codes
    xx, en = read_tatoeba_pairs(folder, "deu", max_pairs=3)
    assert len(xx) == len(en) == 3 and xx[0].startswith("Maria") and en[0].startswith("Mary")


def test_empty_tatoeba_files_are_named(tmp_path: Path):
    # retrieval accuracy refused them as "needs at least one pair", naming no file
    (tmp_path / "tatoeba.deu-eng.deu").write_text("", encoding="utf-8")
    (tmp_path / "tatoeba.deu-eng.eng").write_text("", encoding="utf-8")
    with pytest.raises(InputFileError, match=r"tatoeba.deu-eng.deu: no sentences \(nor in tatoeba.deu-eng.eng\)"):
        read_tatoeba_pairs(tmp_path, "deu")


# ------------------------------------------------------------------ language bias


def test_language_bias_expected_vs_actual():
    # each set alone ranks perfectly (100); joined, set B's cosines are all higher than set A's
    gold = np.array([1.0, 2.0, 3.0])
    bias = language_bias(["en-en", "en-de"], [np.array([0.7, 0.8, 0.9]), np.array([0.1, 0.2, 0.3])], [gold, gold])
    # joined: predicted ranks centred [.5,1.5,2.5,-2.5,-1.5,-.5]; gold ranks with ties centred [-2,0,2,-2,0,2]
    # products -1+0+5+5+0-1 = 8, squares 17.5 and 16 -> 8/sqrt(280)
    assert bias["expected"] == pytest.approx(100.0)
    assert bias["actual"] == pytest.approx(100 * 8 / math.sqrt(280))
    assert bias["difference"] == pytest.approx(100 * 8 / math.sqrt(280) - 100)
    assert bias["per_set"] == pytest.approx({"en-en": 100.0, "en-de": 100.0})


def test_language_bias_leaves_a_set_that_ranks_nothing_out_of_expected():
    # constant gold scores: that set's Spearman is NaN (not measured), and np.mean made expected NaN
    bias = language_bias(
        ["en-en", "de-de"],
        [np.array([0.7, 0.8, 0.9]), np.array([0.1, 0.2, 0.3])],
        [np.array([1.0, 2.0, 3.0]), np.array([2.0, 2.0, 2.0])],
    )
    assert math.isnan(bias["per_set"]["de-de"])
    assert bias["expected"] == pytest.approx(100.0)


# ------------------------------------------------------------------ report helpers


def toy_results(sts17_average: float, tatoeba_average: float) -> dict:
    return {
        "label": "m",
        "benchmarks": {
            "sts17": {
                "scores": {
                    "ar-en": 60.0,
                    "es-en-4a": 70.0,
                    "es-en-4b": 5.0,
                    "tr-en": 50.0,
                    "en-en": 80.0,
                    "average": sts17_average,
                }
            },
            "sts_crosslingual": {"scores": {"en-de": 40.0, "de-en": 30.0, "average": 35.0}},
            "sts_monolingual": {"scores": {"en-en": 85.0, "de-de": 75.0, "average": 80.0}},
            "tatoeba": {
                "scores": {
                    "deu": {"xx2en": 90.0, "en2xx": 80.0, "average": 85.0},
                    "ara": {"xx2en": 70.0, "en2xx": 50.0, "average": 60.0},
                    "average": tatoeba_average,
                }
            },
            "mining_flores": {
                "scores": {"de": {"f1": 88.0}, "average": {"f1": 88.0, "precision": 90.0, "recall": 86.0}}
            },
        },
    }


def test_primary_score_and_per_language_scores():
    results = toy_results(66.0, 72.5)
    # STS: STS17 66 and STSb (mono 80, cross 35 -> 57.5); retrieval: Tatoeba 72.5; mining: F1 88
    assert task_scores(results) == pytest.approx({"sts": (66.0 + 57.5) / 2, "retrieval": 72.5, "mining": 88.0})
    assert primary_score(results) == pytest.approx(((66.0 + 57.5) / 2 + 72.5 + 88.0) / 3)
    del results["benchmarks"]["mining_flores"]  # a task not measured drops out of the mean
    assert primary_score(results) == pytest.approx(((66.0 + 57.5) / 2 + 72.5) / 2)
    per_language = per_language_scores(results, ["ar", "de", "es", "xx"])
    # ar: STS17 ar-en 60 and Tatoeba 60; de: no STS17 track -> STSb cross-lingual 35, Tatoeba 85;
    # es: track 4a only (4b is outside), no Tatoeba result; xx: nothing
    assert per_language["en"] == 80.0
    assert per_language["ar"] == pytest.approx(60.0)
    assert per_language["de"] == pytest.approx((35.0 + 85.0) / 2)
    assert per_language["es"] == pytest.approx(70.0)
    assert per_language["xx"] is None


def test_flatten_and_metrics_view():
    scores = toy_results(1.0, 2.0)["benchmarks"]["tatoeba"]["scores"]
    assert flatten({"a": {"b": 1.0, "c": float("nan")}, "d": 2}) == {"a.b": 1.0, "a.c": None, "d": 2}
    assert metrics_view("tatoeba", scores) == {"deu": 85.0, "ara": 60.0, "average": 2.0}


def test_benchmark_notes_name_a_model_by_its_key():
    # load_baselines keys a file without "label" by its name: reading results["label"] was a KeyError
    results = {"benchmarks": {"mining_flores": {"scores": {}, "info": {"skipped": {"qq": "no FLORES file"}}}}}
    assert benchmark_notes({"old-baseline": results}, "mining_flores") == ["old-baseline: qq skipped (no FLORES file)"]


def test_pca_projection_keeps_the_main_direction():
    points = np.array([[-2.0, 0.0, 0.1], [2.0, 0.0, -0.1], [0.0, 1.0, 0.0], [0.0, -1.0, 0.0]])
    coords, share = project_2d(points)
    assert np.abs(coords[:, 0]).max() == pytest.approx(2.0, abs=1e-2)
    assert share[0] > share[1] > 0 and sum(share) <= 1.0


def test_settings_reject_unknown_keys():
    settings = EvaluationSettings.from_params({"tatoeba_max_pairs": 5}, ["de"])
    assert settings.tatoeba_max_pairs == 5 and settings.languages == ["de"]
    with pytest.raises(XdistillError, match="unknown key"):
        EvaluationSettings.from_params({"tatoeba_max": 5}, ["de"])
    with pytest.raises(XdistillError, match="benchmarks"):
        EvaluationSettings.from_params({"benchmarks": ["sts18"]}, ["de"])
    for key, value in (("tatoeba_max_pairs", -1), ("dev_max_pairs", 0), ("stsb_max_pairs", 1), ("sts17_max_pairs", 0)):
        with pytest.raises(XdistillError, match=rf"params evaluate.{key} must be null \(every pair\) or >="):
            EvaluationSettings.from_params({key: value}, ["de"])


def test_settings_reject_bad_mining_settings_before_any_encoding():
    # checked only where mining reads them, after minutes of encoding the other benchmarks
    for key, value, problem in (
        ("mining_k", 0, "must be >= 1, got 0"),
        ("mining_margin", "cosine", "unknown 'cosine'; choose one of ratio, distance"),
        ("mining_retrieval", "both", "unknown 'both'; choose one of fwd, bwd"),
    ):
        with pytest.raises(XdistillError, match=rf"params evaluate.{key}\W.*{problem}"):
            EvaluationSettings.from_params({key: value}, ["de"])


def test_teacher_space_alone_still_reads_the_dev_pairs(tmp_path: Path, mirror_dir: Path):
    """The teacher-space benchmark scores dev pairs too; without the dev group they were dropped."""
    from xdistill.evaluation.pipeline import prepared_inputs

    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "eval").symlink_to(mirror_dir / "eval", target_is_directory=True)
    dev = tmp_path / "dev.tsv.gz"
    dev.write_bytes(b"")
    for benchmarks, expected in ((["teacher_space"], dev), (["tatoeba"], None)):
        settings = EvaluationSettings.from_params({"benchmarks": benchmarks, "mining_flores": False}, ["de"])
        with prepared_inputs(tmp_path / "raw", settings, dev) as inputs:
            assert inputs.dev_path == expected


def test_tatoeba_language_selection(mirror_dir: Path):
    from xdistill.evaluation.evaluator import EvaluationContext
    from xdistill.evaluation.settings import EvaluationInputs
    from xdistill.evaluation.tatoeba_evaluator import tatoeba_codes

    inputs = EvaluationInputs(eval_dir=mirror_dir / "eval")
    context = EvaluationContext(EvaluationSettings.from_params({}, ["en", "de", "zh"]), inputs)
    configured, evaluated = tatoeba_codes(context)
    assert configured == evaluated == ["deu", "cmn"]
    context = EvaluationContext(EvaluationSettings.from_params({"tatoeba_all": True}, ["de"]), inputs)
    configured, evaluated = tatoeba_codes(context)
    assert configured == ["deu"] and len(evaluated) == 112


def test_a_bucc_dir_outside_the_staged_evaluation_data_is_refused(tmp_path: Path):
    # BUCC files elsewhere are never decontaminated against: scoring them could reward trained-on sentences
    from xdistill.evaluation.pipeline import prepared_inputs

    eval_dir = tmp_path / "raw" / "eval"
    for folder in (eval_dir / "bucc2018", eval_dir / "other", tmp_path / "bucc-elsewhere"):
        folder.mkdir(parents=True)
    for outside in (eval_dir / "other", tmp_path / "bucc-elsewhere"):
        settings = EvaluationSettings.from_params({"benchmarks": ["mining"], "bucc_dir": str(outside)}, ["de"])
        with pytest.raises(XdistillError, match=r"evaluate.bucc_dir must be a folder .*eval/bucc<name>"):
            with prepared_inputs(tmp_path / "raw", settings, None):
                pass
    settings = EvaluationSettings.from_params(
        {"benchmarks": ["mining"], "bucc_dir": str(eval_dir / "bucc2018"), "mining_flores": False}, ["de"]
    )
    with prepared_inputs(tmp_path / "raw", settings, None) as inputs:
        assert inputs.bucc_dir == eval_dir / "bucc2018"


def test_dev_pairs_are_spread_over_every_corpus_of_a_language(tmp_path: Path):
    # the parallel stage writes a language's dev pairs corpus by corpus: the first 4 would all be captions
    from xdistill.data.parallel_tsv import write_parallel_tsv
    from xdistill.evaluation.dev import dev_pairs_by_language

    rows = [
        (f"{corpus} source {i}.", f"{corpus} Quelle {i}.", "de", corpus)
        for corpus in ("multi30k", "tatoeba", "news")
        for i in range(4)
    ]
    rows.append(("A lone pair.", "Ein Satz.", "es", "news"))
    path = tmp_path / "dev.tsv.gz"
    write_parallel_tsv(path, rows)
    pairs = dev_pairs_by_language(path, ["de", "es", "tr"], max_pairs=4)
    assert sorted(pairs) == ["de", "es"] and pairs["es"] == (["A lone pair."], ["Ein Satz."])
    assert {source.split()[0] for source in pairs["de"][0]} == {"multi30k", "tatoeba", "news"}
    assert dev_pairs_by_language(path, ["de"])["de"][0] == [row[0] for row in rows[:12]]  # no cap: every pair


def test_prepared_inputs_build_the_flores_mining_benchmark(tmp_path: Path, mirror_dir: Path):
    from xdistill.evaluation.pipeline import prepared_inputs

    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "eval").symlink_to(mirror_dir / "eval", target_is_directory=True)
    settings = EvaluationSettings.from_params({"benchmarks": ["mining"], "mining_repeats": 2}, ["de"])
    with prepared_inputs(tmp_path / "raw", settings, None) as inputs:
        assert len(inputs.flores_mining_dirs) == 2
        for built in inputs.flores_mining_dirs:
            assert (built / "de-en.train.de").is_file() and (built / "de-en.test.gold").is_file()
        first, second = ((d / "de-en.test.gold").read_text() for d in inputs.flores_mining_dirs)
        assert first != second  # two constructions (seeds), not one copied
        assert inputs.dev_path is None and inputs.bucc_dir is None
    assert not built.exists()  # a temporary folder, gone after the run
    with pytest.raises(XdistillError, match="evaluation data folder not found"):
        with prepared_inputs(tmp_path / "nowhere", settings, None):
            pass


def test_the_settings_groups_are_the_evaluators_groups() -> None:
    """The settings own the benchmark groups as plain data; the registry refuses any drift from its evaluators."""
    from xdistill.evaluation.registry import EVALUATORS, check_groups
    from xdistill.evaluation.settings import BENCHMARK_GROUPS

    check_groups(EVALUATORS, BENCHMARK_GROUPS)
    assert EvaluationSettings(languages=["en"]).benchmarks == list(BENCHMARK_GROUPS)
    with pytest.raises(RuntimeError, match="differ from the evaluators' groups"):
        check_groups(EVALUATORS, (*BENCHMARK_GROUPS, "no_evaluator"))
    with pytest.raises(RuntimeError, match="differ from the evaluators' groups"):
        check_groups(EVALUATORS, tuple(reversed(BENCHMARK_GROUPS)))
