"""The cleaning chain (each step on hand-computed cases), decontamination and the sampling helpers."""

from __future__ import annotations

import itertools
import os
import random
import subprocess
import sys
from collections import Counter

import pytest
from data_helpers import stage_tiny_raw

from xdistill.data import normalize
from xdistill.data.clean import Cleaner, CleaningConfig, SeenPairs, default_student_tokenizer, load_token_counter
from xdistill.data.decontaminate import evaluation_sentences
from xdistill.data.normalize import decontamination_key, inner_sentences
from xdistill.data.sampling import (
    Reservoir,
    fill_in_proportion,
    interleave,
    repeat_and_select,
    source_targets,
    split_evenly,
)
from xdistill.errors import InputFileError

SMALL_DEDUP = {"dedup_bits_log2": 16}


def run_chain(triples, evaluation=frozenset(), languages=("de",), token_counter=None, **config):
    cleaner = Cleaner(CleaningConfig(**{**SMALL_DEDUP, **config}), set(evaluation), languages, token_counter)
    kept = list(cleaner.run("toy", triples))
    return cleaner, kept


def test_each_step_counted_in_chain_order():
    triples = [
        ("de", "  Good  morning. ", "Guten\tMorgen."),  # kept (normalised)
        ("de", "", "Leer"),  # empty
        ("de", "x" * 30, "y" * 31),  # too_long (max_chars 30)
        ("de", "Berlin", "berlin"),  # untranslated (case-insensitive copy)
        ("de", "Hello there my friend.", "Hi."),  # length_ratio: 22 > 3 * 3
        ("de", "Yes.", "Ja."),  # short pair: ratio 4/3 fine anyway -> kept
        ("de", "Good morning.", "Guten Morgen."),  # duplicate of the first after normalisation
        ("de", "I like tea.", "Ich mag Tee."),  # contaminated (target in an eval set)
        ("de", "No.", "Nein."),  # kept: ratio test exempt below ratio_min_chars
    ]
    cleaner, kept = run_chain(
        triples,
        evaluation={decontamination_key("Ich mag Tee.")},
        max_chars=30,
        max_length_ratio=3.0,
        ratio_min_chars=12,
    )
    assert kept == [("de", "Good morning.", "Guten Morgen."), ("de", "Yes.", "Ja."), ("de", "No.", "Nein.")]
    counts = cleaner.counts[("toy", "de")]
    assert counts.read == 9 and counts.normalized == 1  # only the first pair had odd whitespace
    assert counts.dropped == {
        "empty": 1,
        "too_long": 1,
        "untranslated": 1,
        "length_ratio": 1,
        "duplicate": 1,
        "language_id": 0,
        "contaminated": 1,
    }
    assert counts.after_each_step()["contaminated"] == 3 == counts.kept
    assert len(cleaner.examples["contaminated"]) == 1 and "Ich mag Tee." in cleaner.examples["contaminated"][0]


def test_length_ratio_counts_cjk_characters_as_three():
    from xdistill.data.clean import ratio_length

    assert ratio_length("Hello") == 5 and ratio_length("Grüße") == 5 and ratio_length("我喜欢猫。") == 13
    # real Tatoeba en-zh pairs: a character ratio of ~3-4 is normal for Chinese; only a real mismatch goes
    pairs = [
        ("zh", "I like to read books in the evening.", "我晚上喜欢看书。"),  # 36 vs 8 chars
        ("zh", "Where is the nearest train station?", "最近的火车站在哪里？"),  # 35 vs 10 chars
        ("zh", "Tom was very tired after working all day long in the field.", "汤姆。"),
    ]
    cleaner, kept = run_chain(pairs, max_length_ratio=3.0, ratio_min_chars=12)
    assert [t[2] for t in kept] == ["我晚上喜欢看书。", "最近的火车站在哪里？"]
    assert cleaner.counts[("toy", "zh")].dropped["length_ratio"] == 1


def test_length_ratio_boundary_and_source_side_contamination():
    pairs = [("de", "a" * 12, "b" * 4), ("de", "c" * 13, "d" * 4), ("de", "The eval sentence.", "Der Satz.")]
    cleaner, kept = run_chain(
        pairs, evaluation={decontamination_key("The eval sentence.")}, max_length_ratio=3.0, ratio_min_chars=12
    )
    assert kept == [("de", "a" * 12, "b" * 4)]  # 12 == 3 * 4 is allowed, 13 > 12 is not
    assert cleaner.counts[("toy", "de")].dropped["length_ratio"] == 1
    assert cleaner.counts[("toy", "de")].dropped["contaminated"] == 1


def test_token_length_filter_with_the_student_tokenizer():
    counter = load_token_counter(default_student_tokenizer())
    short, long_ = "A cat.", " ".join(["antidisestablishmentarianism"] * 6)
    assert counter(short) < 6 < counter(long_)
    cleaner, kept = run_chain(
        [("de", short, "Eine Katze."), ("de", long_, "Wort.")],
        max_tokens=8,
        max_length_ratio=None,
        token_counter=counter,
    )
    assert kept == [("de", short, "Eine Katze.")]
    assert cleaner.counts[("toy", "de")].dropped["too_long"] == 1


def test_language_identification_drops_wrong_language():
    pairs = [
        ("de", "The weather is very nice today.", "Das Wetter ist heute sehr schön."),
        ("de", "The weather is very nice today, really.", "El tiempo es muy agradable hoy."),  # Spanish, not German
        ("de", "Ok.", "Si."),  # too short to judge
        ("ar", "Sami gave Layla a hug right now.", "عانق سامي ليلى."),  # names: not confidently other
    ]
    cleaner, kept = run_chain(pairs, languages=("ar", "de", "es", "tr"), language_id=True, max_length_ratio=None)
    assert [p[2] for p in kept] == ["Das Wetter ist heute sehr schön.", "Si.", "عانق سامي ليلى."]
    assert cleaner.counts[("toy", "de")].dropped["language_id"] == 1


def test_seen_pairs_is_exact_on_small_inputs():
    seen = SeenPairs(20)
    first = [seen.add(f"s{i}", f"t{i}") for i in range(2000)]
    again = [seen.add(f"s{i}", f"t{i}") for i in range(2000)]
    assert not any(first) and all(again)
    assert seen.count == 2000 and seen.false_positive_rate() < 1e-4
    other = SeenPairs(20)
    other.add("s1", "t1")
    assert bytes(other.table) != bytes(SeenPairs(20).table)
    assert other.add("s1", "t1") and not other.add("t1", "s1")


def test_near_copies_of_evaluation_sentences_are_contaminated_too():
    """Case, the punctuation and quotes around a sentence and apostrophes do not make another sentence (found in the
    mirror: WMT's "Tough, tough, tough." is STS17 4b's `Tough, tough, tough.`, Multi30k has STS17 sentences in lower
    case, Tatoeba writes o'clock where LASER's copy has o’clock)."""
    evaluation = {
        decontamination_key(s)
        for s in ("Tough, tough, tough.", "A muzzled greyhound dog is running.", "It is five o’clock.")
    }
    pairs = [
        ("es", '"Tough, tough, tough."', "Duro, duro, duro."),
        ("de", "a muzzled greyhound dog is running", "Ein Windhund mit Maulkorb rennt."),
        ("de", "It is five o'clock.", "Es ist fünf Uhr."),
        ("de", "It is five o'clock now.", "Es ist jetzt fünf Uhr."),
    ]
    cleaner, kept = run_chain(pairs, evaluation, languages=("de", "es"))
    assert kept == [pairs[3]]
    assert decontamination_key(" «¿Qué?» ") == "qué" and decontamination_key("?!") == ""


def test_an_evaluation_sentence_inside_a_multi_sentence_unit_is_contaminated():
    """A TED line, an OPUS unit or a Tatoeba entry of several sentences is dropped when one of them is an
    evaluation sentence (found in the default's training sample: Tatoeba's "I'm not drunk. I'm as sober as a
    judge." holds a LASER test sentence); sentences are split after . ! ? (space) and after CJK 。！？ (none)."""
    evaluation = {decontamination_key(s) for s in ("I'm not drunk.", "The train is about to leave.", "我很好。")}
    pairs = [
        ("de", "I'm not drunk. I'm as sober as a judge.", "Ich bin nicht betrunken. Ich bin stocknüchtern."),
        ("de", "Please step aboard! The train is about to leave.", "Bitte einsteigen! Der Zug fährt gleich ab."),
        ("zh", "Thank you. I'm fine.", "谢谢。我很好。"),
        ("de", "Mr. Smith is not drunk.", "Herr Smith ist nicht betrunken."),  # an abbreviation's pieces: no match
        ("de", "I'm not drunk at all, I'm sober.", "Ich bin gar nicht betrunken."),
    ]
    cleaner, kept = run_chain(pairs, evaluation, languages=("de", "zh"))
    assert kept == pairs[3:] and cleaner.counts[("toy", "de")].dropped["contaminated"] == 2
    assert cleaner.counts[("toy", "zh")].dropped["contaminated"] == 1
    assert inner_sentences("谢谢。我很好。") == ["谢谢。", "我很好。"] and inner_sentences("One sentence only.") == []
    assert inner_sentences("Really?! Yes.") == ["Really?!", "Yes."] and inner_sentences("Why? ...") == ["Why?"]


def test_the_inner_sentence_pre_check_never_skips_a_text_the_regex_would_split():
    """The substring pre-check exists for speed only: over every short text of sentence marks, spaces (ASCII,
    tab, NBSP), CJK marks and letters, whatever the full regex splits must pass the pre-check."""
    alphabet = ("a", "字", ".", "?", "\u061f", "\u3002", "\uff01", " ", "\t", "\u00a0")
    texts = ("".join(chars) for length in range(1, 5) for chars in itertools.product(alphabet, repeat=length))
    missed = [
        text
        for text in texts
        if normalize._INNER_SENTENCE_END.search(text) and not normalize._may_hold_inner_sentence_end(text)
    ]
    assert missed == []
    assert not normalize._may_hold_inner_sentence_end("One sentence only.")
    assert not normalize._may_hold_inner_sentence_end("我很好。")


def test_evaluation_sentences_and_planted_contamination(tmp_path, mirror_dir):
    raw = tmp_path / "raw"
    stage_tiny_raw(raw, mirror_dir, ["de"])
    sentences = evaluation_sentences(raw)
    laser_de = (raw / "eval/tatoeba-laser/tatoeba.deu-eng.deu").read_text(encoding="utf-8").splitlines()
    sts_first = (
        (raw / "eval/sts17/STS2017.eval.v1.1/STS.input.track5.en-en.txt").read_text(encoding="utf-8").splitlines()[0]
    )
    assert decontamination_key(laser_de[0]) in sentences and decontamination_key(sts_first.split("\t")[1]) in sentences
    assert len(sentences) > 1500
    planted = ("de", "Some harmless training sentence.", laser_de[0])
    cleaner, kept = run_chain([("de", "A clean pair here.", "Ein sauberes Paar hier."), planted], evaluation=sentences)
    assert kept == [("de", "A clean pair here.", "Ein sauberes Paar hier.")]
    assert cleaner.counts[("toy", "de")].dropped["contaminated"] == 1


def test_decontamination_reads_what_the_benchmarks_read(tmp_path, mirror_dir):
    """Both go through xdistill.data.eval_formats: every sentence a benchmark scores is decontaminated,
    and a damaged evaluation file stops both with the same message (file and line)."""
    from xdistill.data.eval_formats import read_flores
    from xdistill.evaluation.sts import STS17_GOLD_DIR, STS17_INPUT_DIR, STS17_TRACKS, build_stsb_sets, load_sts17
    from xdistill.evaluation.tatoeba import read_tatoeba_pairs

    raw = tmp_path / "raw"
    sts17 = [
        f"{folder}/STS.{kind}.{stem}.txt"
        for stem in STS17_TRACKS.values()
        for folder, kind in ((STS17_INPUT_DIR, "input"), (STS17_GOLD_DIR, "gs"))
    ]
    stage_tiny_raw(
        raw,
        mirror_dir,
        ["de"],
        {
            "eval/sts17": sts17,
            "eval/stsb-multi-mt": ["data/stsb-en-test.csv", "data/stsb-{lang}-test.csv"],
            "eval/flores200-devtest": ["deu_Latn.devtest"],
        },
    )
    eval_dir = raw / "eval"
    sentences = evaluation_sentences(raw)
    scored = [s for track in load_sts17(eval_dir / "sts17") for s in track.sentences1 + track.sentences2]
    monolingual, crosslingual = build_stsb_sets(eval_dir / "stsb-multi-mt", ["de"])
    scored += [s for sts in monolingual + crosslingual for s in sts.sentences1 + sts.sentences2]
    scored += [s for side in read_tatoeba_pairs(eval_dir / "tatoeba-laser", "deu") for s in side]
    scored += read_flores(eval_dir / "flores200-devtest" / "deu_Latn.devtest")
    assert len(scored) > 1500
    assert {decontamination_key(s) for s in scored} - {""} <= sentences

    stsb_de = eval_dir / "stsb-multi-mt" / "data" / "stsb-de-test.csv"
    stsb_de.write_text(stsb_de.read_text(encoding="utf-8") + "only,two\n", encoding="utf-8")
    with pytest.raises(InputFileError) as from_evaluation:
        build_stsb_sets(eval_dir / "stsb-multi-mt", ["de"])
    with pytest.raises(InputFileError) as from_decontamination:
        evaluation_sentences(raw)
    assert str(from_decontamination.value) == str(from_evaluation.value)
    assert from_evaluation.value.path == stsb_de and "expected 3 CSV fields" in str(from_evaluation.value)


# ----------------------------------------------------------------- sampling


def test_source_targets_proportional_capped_and_uncapped():
    available = {"big": 10_000, "small": 100, "off": 50}
    weights = {"big": 1.0, "small": 1.0, "off": 0.0}
    # small can give at most 2 x 100; what it cannot give goes to big
    assert source_targets(available, weights, cap=1000, max_repeats=2.0) == {"big": 800, "small": 200, "off": 0}
    assert source_targets(available, weights, cap=None, max_repeats=2.0) == {"big": 10_000, "small": 100, "off": 0}
    assert source_targets(available, {"big": 3.0, "small": 1.0, "off": 0.0}, cap=400, max_repeats=5.0) == {
        "big": 300,
        "small": 100,
        "off": 0,
    }


def test_split_evenly_and_repeat_and_select():
    assert split_evenly(10, {"a": 100, "b": 100, "c": 0}, 2.0) == {"a": 5, "b": 5, "c": 0}
    assert split_evenly(11, {"a": 2, "b": 100}, 2.0) == {"a": 4, "b": 7}
    thirds = fill_in_proportion(10, {"a": 1.0, "b": 1.0, "c": 1.0}, {"a": 99, "b": 99, "c": 99})
    assert sum(thirds.values()) == 10 and sorted(thirds.values()) == [3, 3, 4]
    assert fill_in_proportion(50, {"a": 1.0, "b": 1.0}, {"a": 5, "b": 10}) == {"a": 5, "b": 10}
    rng = random.Random(0)
    drawn = list(repeat_and_select(range(10), 10, 25, rng))
    counts = Counter(drawn)
    assert len(drawn) == 25 and set(counts.values()) == {2, 3} and sum(v == 3 for v in counts.values()) == 5
    subset = list(repeat_and_select(range(1000), 1000, 100, random.Random(1)))
    assert len(subset) == 100 == len(set(subset)) and subset == sorted(subset)


def test_reservoir_and_interleave():
    reservoir = Reservoir(5, random.Random(2))
    for item in range(1000):
        reservoir.offer(item)
    assert len(reservoir.items) == 5 and reservoir.seen == 1000 and max(reservoir.items) > 5
    merged = list(interleave({"a": (3, iter("aaa")), "b": (6, iter("bbbbbb"))}, random.Random(3)))
    assert sorted(merged) == list("aaabbbbbb") and merged != sorted(merged)


_FILTER_DIGEST = """
import hashlib
from xdistill.data.clean import SeenPairs
seen = SeenPairs(12)  # small enough that false positives occur: their set must not depend on the process
print(sum(seen.add(f"source {i}", f"Übersetzung {i}") for i in range(3000)), hashlib.sha256(seen.table).hexdigest())
"""


def test_seen_pairs_is_the_same_filter_in_every_process():
    # Python's str hash is salted per process (PYTHONHASHSEED); the filter's hash must not be, or which pairs a
    # run drops as (false) duplicates would vary between runs of the same stage.
    outputs = {
        subprocess.run(
            [sys.executable, "-c", _FILTER_DIGEST],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(outputs) == 1
    false_duplicates = int(outputs.pop().split()[0])
    assert false_duplicates > 0  # the test exercises the false positives, not only the exact part


@pytest.mark.parametrize("bits", [9, 33])
def test_seen_pairs_rejects_silly_sizes(bits):
    with pytest.raises(Exception, match="dedup_bits_log2"):
        SeenPairs(bits)


def test_a_near_copy_of_a_dev_sentence_is_held_out_of_training():
    from xdistill.data.parallel import _is_held_out

    dev = {decontamination_key(s) for s in ("A dog runs.", "Ein Hund rennt.")}
    assert _is_held_out(("toy", "de", 7), "a dog runs", "Der Hund läuft.", set(), dev)
    assert not _is_held_out(("toy", "de", 8), "A cat runs.", "Eine Katze rennt.", set(), dev)


def test_decontamination_keys_fold_compatibility_forms_and_invisible_marks() -> None:
    """Copies the student's tokenizer cannot tell apart (it normalises with NFKC and drops format characters)
    are one sentence for decontamination too."""
    assert decontamination_key("１２時です。") == decontamination_key("12時です。")
    assert decontamination_key("Ｉ ｌｏｖｅ ｙｏｕ") == decontamination_key("I love you")
    assert decontamination_key("\ufeffHello there.") == decontamination_key("Hello there.")
    assert decontamination_key("\u200fأحب القهوة") == decontamination_key("أحب القهوة")
    assert decontamination_key("zero\u200bwidth") == decontamination_key("zerowidth")
    # apostrophes fold before NFKC, which would turn the acute accent into a space and a combining mark
    assert decontamination_key("It is ten o´clock, café.") == decontamination_key("It is ten o'clock, café.")
    assert decontamination_key("Straße") != decontamination_key("Strasse ist lang")  # other words stay apart
