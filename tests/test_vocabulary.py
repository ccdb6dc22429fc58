"""Vocabulary trimming on the real mE5 tokenizer: same pieces and embeddings for every kept language."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

from tests.lightweight_helpers import tatoeba_pairs, tiny_e5_student, write_parallel
from tests.trainer_helpers import minilm_folder
from xdistill.errors import XdistillError
from xdistill.models.backbone import transformer_backbone
from xdistill.models.vocabulary import (
    DEFAULT_PARALLEL_FILES,
    backend_tokenizer,
    corpus_texts,
    tokenisation_agreement,
    trim_vocabulary,
    vocabulary_digest,
)
from xdistill.training.student import StudentConfig, build_student, save_student

pytestmark = pytest.mark.slow  # every test here is over ~4 s, or shares a fixture that is

KEPT = ["de", "ar", "zh", "tr"]


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A project folder with parallel files of KEPT languages and a staged Tatoeba test set of two languages."""
    root = tmp_path_factory.mktemp("vocab-project")
    pairs = {lang: tatoeba_pairs(lang, 40) for lang in KEPT}
    write_parallel(root / "data/parallel/train.tsv.gz", {lang: rows[:30] for lang, rows in pairs.items()})
    write_parallel(root / "data/parallel/dev.tsv.gz", {lang: rows[30:] for lang, rows in pairs.items()})
    tatoeba = root / "data/raw/eval/tatoeba-laser"
    tatoeba.mkdir(parents=True)
    for lang, code in (("de", "deu"), ("ru", "rus")):  # ru is not a kept language
        rows = tatoeba_pairs(lang, 5, skip=100)
        (tatoeba / f"tatoeba.{code}-eng.{code}").write_text("".join(f"{xx}\n" for _, xx in rows), encoding="utf-8")
        (tatoeba / f"tatoeba.{code}-eng.eng").write_text("".join(f"{en}\n" for en, _ in rows), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def students(project: Path, tmp_path_factory):
    """(full, trimmed through ``train.student.vocabulary: corpus``) tiny mE5 students."""
    full = tiny_e5_student()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(project)  # `corpus` reads data/parallel and data/raw of the project, as in dvc.yaml
        trimmed = tiny_e5_student(vocabulary="corpus")
    return full, trimmed


def test_a_corpus_vocabulary_reads_the_runs_own_files_wherever_the_process_runs(
    project: Path, students, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.lightweight_helpers import E5_SPEC

    _, trimmed = students
    monkeypatch.chdir(tmp_path)  # no data/ here: the files come from the caller, not the working folder
    parallel = [project / "data/parallel/train.tsv.gz", project / "data/parallel/dev.tsv.gz"]
    config = StudentConfig(E5_SPEC, keep_layers=1, max_seq_length=64, vocabulary="corpus")
    same = build_student(config, parallel_files=parallel, raw_dir=project / "data/raw")
    assert vocabulary_digest(same) == vocabulary_digest(trimmed)
    # another corpus, another vocabulary: the digest a checkpoint's fingerprint holds tells them apart
    fewer = build_student(config, parallel_files=parallel[1:], raw_dir=None)
    assert len(fewer.tokenizer) < len(same.tokenizer) and vocabulary_digest(fewer) != vocabulary_digest(same)


def test_corpus_texts_hold_parallel_pairs_and_kept_languages_eval_sets(project: Path) -> None:
    texts = set(
        corpus_texts(
            [project / "data/parallel/train.tsv.gz", project / "data/parallel/dev.tsv.gz"], project / "data/raw"
        )
    )
    german_test = tatoeba_pairs("de", 5, skip=100)
    russian_test = tatoeba_pairs("ru", 5, skip=100)
    assert all(en in texts and xx in texts for en, xx in german_test)
    assert not any(xx in texts or en in texts for en, xx in russian_test)
    assert all(xx in texts for lang in KEPT for _, xx in tatoeba_pairs(lang, 40))


def test_trimmed_student_tokenises_every_kept_language_as_before(students, project: Path, tmp_path: Path) -> None:
    full, trimmed = students
    vocabulary = len(trimmed.tokenizer)
    assert vocabulary < 20_000 < 250_002 == len(full.tokenizer)
    assert transformer_backbone(trimmed).get_input_embeddings().num_embeddings == vocabulary
    assert not transformer_backbone(trimmed).get_input_embeddings().weight.requires_grad  # still frozen
    sentences = [text for lang in KEPT for pair in tatoeba_pairs(lang, 40) for text in pair]
    full_tok, trimmed_tok = backend_tokenizer(full), backend_tokenizer(trimmed)
    for sentence in sentences:
        before, after = full_tok.encode("query: " + sentence), trimmed_tok.encode("query: " + sentence)
        assert after.tokens == before.tokens, sentence
        assert after.ids != before.ids or max(before.ids) < vocabulary
    assert tokenisation_agreement(full, trimmed, sentences) == 1.0
    expected = full.encode(sentences)
    np.testing.assert_allclose(trimmed.encode(sentences), expected, atol=1e-5)

    folder = save_student(trimmed, tmp_path / "trimmed")
    loaded = SentenceTransformer(str(folder), device="cpu")
    assert len(loaded.tokenizer) == vocabulary and loaded.tokenizer.pad_token_id == 1
    assert loaded.tokenizer.tokenize("query: " + sentences[3]) == full.tokenizer.tokenize("query: " + sentences[3])
    np.testing.assert_allclose(loaded.encode(sentences), expected, atol=1e-5)
    full_parameters = sum(p.numel() for p in full.parameters())
    assert sum(p.numel() for p in loaded.parameters()) < full_parameters - 200_000 * 384


def test_text_outside_the_corpus_splits_into_kept_pieces_without_unknowns(students) -> None:
    """Unseen words of a kept language may split into more pieces, but into the same characters."""
    full, trimmed = students
    full_tok, trimmed_tok = backend_tokenizer(full), backend_tokenizer(trimmed)
    chars_seen = {ch for lang in KEPT for pair in tatoeba_pairs(lang, 40) for ch in "".join(pair)}
    held_out = [xx for lang in KEPT for _, xx in tatoeba_pairs(lang, 30, skip=200)]
    checked = 0
    for sentence in held_out:
        if not set(sentence.replace(" ", "")) <= chars_seen:
            continue
        before, after = full_tok.encode(sentence), trimmed_tok.encode(sentence)
        assert trimmed.tokenizer.unk_token_id not in after.ids, sentence
        assert "".join(after.tokens) == "".join(before.tokens), sentence
        checked += 1
    assert checked >= 20


def test_trimming_rejects_a_wordpiece_tokenizer_and_an_empty_corpus() -> None:
    minilm = build_student(StudentConfig(minilm_folder(), keep_layers=1))
    with pytest.raises(XdistillError, match="Unigram"):
        trim_vocabulary(minilm, ["A sentence."])
    e5 = tiny_e5_student()
    with pytest.raises(XdistillError, match="no text"):
        trim_vocabulary(e5, [])


def test_unknown_vocabulary_option_is_a_clear_error() -> None:
    with pytest.raises(XdistillError, match="vocabulary must be null or one of"):
        tiny_e5_student(vocabulary="everything")


def test_vocabulary_is_a_train_student_param() -> None:
    assert StudentConfig.from_params("spec", {"vocabulary": "corpus"}, 64).vocabulary == "corpus"
    assert StudentConfig.from_params("spec", {}, 64).vocabulary is None
    with pytest.raises(XdistillError, match="vocabulary must be null or one of"):
        StudentConfig.from_params("spec", {"vocabulary": "all"}, 64)


def test_corpus_option_without_parallel_files_names_the_missing_file(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(XdistillError, match="data/parallel/train.tsv.gz"):
        tiny_e5_student(vocabulary="corpus")


def test_a_trimmed_vocabulary_keeps_the_dev_mining_blocks_validation_tokenises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trainer scores the held-out news blocks with the trimmed tokenizer: their names must keep their
    pieces, so it trims over the blocks file too when its run has one (the defaults are the train and dev
    pairs every run has). A header-only blocks file (no source sets dev_mining_block) adds nothing and is no
    error."""
    monkeypatch.chdir(tmp_path)
    folder = Path("data/parallel")
    write_parallel(folder / "train.tsv.gz", {"de": [("A cat.", "Eine Katze.")]})
    write_parallel(folder / "dev.tsv.gz", {"de": [("A dog.", "Ein Hund.")]})
    write_parallel(folder / "dev_mining.tsv.gz", {"de": [("Zyxwvutsrq spoke.", "Zyxwvutsrq sprach.")]})
    trainer_files = (*DEFAULT_PARALLEL_FILES, folder / "dev_mining.tsv.gz")  # what the trainer passes then
    assert "Zyxwvutsrq sprach." in set(corpus_texts(trainer_files, raw_dir=None))
    assert "Zyxwvutsrq sprach." not in set(corpus_texts(raw_dir=None))
    write_parallel(folder / "dev_mining.tsv.gz", {})
    assert set(corpus_texts(trainer_files, raw_dir=None)) == {"A cat.", "Eine Katze.", "A dog.", "Ein Hund."}
