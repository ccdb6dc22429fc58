"""Readers of every parallel format, on real mirror files and hand-made broken files."""

from __future__ import annotations

import gzip

import pytest
from data_helpers import write_lines

from xdistill.data import formats
from xdistill.data.normalize import normalize_text
from xdistill.errors import InputFileError

TED = "train/ted2020-sample"


def checkers(share: float = 0.5) -> formats.Checkers:
    return formats.Checkers(share)


# ----------------------------------------------------------------- normalisation


def test_normalize_text_nfc_and_whitespace():
    assert normalize_text("Cafe\u0301") == "Caf\u00e9"  # combining acute -> precomposed
    assert normalize_text("  a\tb\u00a0 c\n\r d  ") == "a b c d"
    assert normalize_text("\u3000") == ""
    assert normalize_text("plain ascii") == "plain ascii"


# ----------------------------------------------------------------- TED2020


def test_ted2020_reader_on_real_excerpt(mirror_dir):
    triples = list(formats.read_ted2020(mirror_dir / TED / "TED2020-v1.en-de.sample.tsv", ["de", "fr"], checkers()))
    assert len(triples) == 100
    assert triples[0] == ("de", "Thank you so much , Chris .", "Vielen Dank , Chris .")
    assert {lang for lang, _, _ in triples} == {"de"}


def test_opus_sample_matches_the_tsv_excerpt(mirror_dir):
    """The OPUS alignment listing (src=de, trg=en; 1:2 and 2:1 units) gives exactly the TSV's pairs."""
    tsv = list(formats.read_ted2020(mirror_dir / TED / "TED2020-v1.en-de.sample.tsv", ["de"], checkers()))
    opus = list(formats.read_opus_sample(mirror_dir / TED / "de-en_sample.raw.txt", "trg", "de", checkers()))
    assert opus == tsv
    # unit 2 has two German sentences joined with a space
    assert opus[1][2].endswith("stehen zu dürfen . Tausend Dank dafür .")


def test_ted2020_multilingual_file_with_empty_cells_and_bad_rows(tmp_path):
    path = write_lines(
        tmp_path / "TED2020.tsv.gz",
        [
            "en\tde\tar\tfr",
            "Hello .\tHallo .\t\tBonjour .",  # no Arabic translation: empty cell
            "\tNur Deutsch\t\t",  # no English: nothing
            "Thanks .\tDanke .\tشكرا .\tMerci .",
            "Too\tfew",  # wrong column count
            "en\tde\tar\tfr",  # the header again (concatenated files)
            "Bye .\tTschüss .\tوداعا .\t",
        ],
    )
    chk = checkers()
    triples = list(formats.read_ted2020(path, ["de", "ar"], chk))
    assert triples == [
        ("de", "Hello .", "Hallo ."),
        ("de", "Thanks .", "Danke ."),
        ("ar", "Thanks .", "شكرا ."),
        ("de", "Bye .", "Tschüss ."),
        ("ar", "Bye .", "وداعا ."),
    ]
    summary = chk.by_file[str(path)].summary()
    assert summary["bad"] == 2
    assert summary["reasons"] == {"2 columns, expected 4": 1, "stray header row": 1}
    assert summary["quotes"][0].startswith(f"{path}:5: 2 columns")
    # what the format leaves out is counted, not malformed: the report accounts for every row read
    assert summary["skipped"] == {"no ar translation": 1, "empty English cell": 1}


def test_extract_ted2020_fixed_dev_units(mirror_dir, tmp_path):
    counts = formats.extract_ted2020(
        mirror_dir / TED / "TED2020-v1.en-de.sample.tsv", ["de", "fr"], 10, tmp_path, checkers()
    )
    assert counts == {"de": (90, 10), "fr": (0, 0)}
    dev = gzip.decompress((tmp_path / "TED2020-en-de-dev.tsv.gz").read_bytes()).decode().splitlines()
    train = gzip.decompress((tmp_path / "TED2020-en-de-train.tsv.gz").read_bytes()).decode().splitlines()
    assert len(dev) == 10 and len(train) == 90
    assert dev[0] == "Thank you so much , Chris .\tVielen Dank , Chris ."
    assert not set(dev) & set(train)
    assert not list(tmp_path.glob(".*"))  # no temporary files left


# ----------------------------------------------------------------- other formats on real files


def test_generic_sentence_transformers_tsv(tmp_path):
    path = write_lines(tmp_path / "parallel.tsv", ["Hello\tHallo\tHola", "Cat\tKatze\t", "Dog\tHund\tPerro\textra"])
    chk = checkers(0.5)
    triples = list(formats.read_st_parallel(path, None, ["de", "es"], chk))
    assert triples == [("de", "Hello", "Hallo"), ("es", "Hello", "Hola"), ("de", "Cat", "Katze")]
    assert chk.by_file[str(path)].bad == 1
    assert chk.by_file[str(path)].skipped == {"no es translation": 1}
    # one language, any number of translations per row
    path2 = write_lines(tmp_path / "talks-en-de.tsv", ["Hello\tHallo\tGrüß dich", "Yes\tJa"])
    assert list(formats.read_st_parallel(path2, "de", None, checkers())) == [
        ("de", "Hello", "Hallo"),
        ("de", "Hello", "Grüß dich"),
        ("de", "Yes", "Ja"),
    ]


def test_moses_multi30k_real(mirror_dir):
    raw = mirror_dir / "train/multi30k/data/task1/raw"
    triples = list(formats.read_moses(raw / "val.en.gz", raw / "val.de.gz", "de", checkers()))
    assert len(triples) == 1014
    assert triples[0][0] == "de" and triples[0][1].startswith("A group of men are loading cotton")


def test_moses_english_file_shared_by_two_languages(mirror_dir):
    """Multi30k: one English file is the partner of both German and French (one checker, two reads)."""
    raw = mirror_dir / "train/multi30k/data/task1/raw"
    shared = checkers()
    german = list(formats.read_moses(raw / "val.en.gz", raw / "val.de.gz", "de", shared))
    french = list(formats.read_moses(raw / "val.en.gz", raw / "val.fr.gz", "fr", shared))
    assert len(german) == len(french) == 1014
    assert [t[1] for t in german] == [t[1] for t in french]


def test_moses_bad_line_drops_the_pair_and_unequal_lengths_fail(tmp_path):
    en = write_lines(tmp_path / "c.en", ["one", "two", "three"])
    de = write_lines(tmp_path / "c.de", [b"eins", b"zw\x00ei", b"drei"])
    chk = checkers(0.5)
    assert list(formats.read_moses(en, de, "de", chk)) == [("de", "one", "eins"), ("de", "three", "drei")]
    assert chk.by_file[str(de)].reasons == {"NUL byte": 1}
    short = write_lines(tmp_path / "short.de", ["eins", "zwei"])
    with pytest.raises(InputFileError, match="fewer lines"):
        list(formats.read_moses(en, short, "de", checkers()))


def test_stsb_multi_mt_train_split_pairs_both_sentences_of_each_row(mirror_dir, tmp_path):
    data = mirror_dir / "eval/stsb-multi-mt/data"
    triples = list(formats.read_stsb_translations(data / "stsb-en-train.csv", data / "stsb-de-train.csv", "de"))
    assert len(triples) == 2 * 5749
    assert triples[:2] == [
        ("de", "A plane is taking off.", "Ein Flugzeug hebt gerade ab."),
        ("de", "An air plane is taking off.", "Ein Flugzeug hebt gerade ab."),
    ]
    # rows out of step (the German first row moved to the end, so the scores disagree): file and row named
    lines = (data / "stsb-de-train.csv").read_text(encoding="utf-8").splitlines(keepends=True)
    shifted = tmp_path / "stsb-de-train.csv"
    shifted.write_text("".join(lines[1:] + lines[:1]), encoding="utf-8")
    with pytest.raises(InputFileError, match="rows are not aligned") as info:
        list(formats.read_stsb_translations(data / "stsb-en-train.csv", shifted, "de"))
    assert info.value.path == shifted and info.value.line == 1


def test_tatoeba_real(mirror_dir):
    path = mirror_dir / "train/tatoeba-challenge/tatoeba-challenge.minus-laser-test.en-de.tsv.gz"
    first = next(formats.read_tatoeba(path, "de", checkers()))
    assert first == ("de", "Tom likes Italian food.", "Tom mag die italienische Küche.")


def test_wmt_real_header_and_excluded_testset(mirror_dir, tmp_path):
    path = mirror_dir / "train/wmt-newstest/newstest.en-tr.tsv.gz"
    triples = list(formats.read_wmt(path, "tr", ["newstest2017"], checkers()))
    assert triples and all(lang == "tr" for lang, _, _ in triples)
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        rows = [line.split("\t") for line in handle][1:]
    assert len(triples) == sum(1 for r in rows if not r[0].startswith("newstest2017"))
    chk = checkers()
    list(formats.read_wmt(path, "tr", ["newstest2017"], chk))
    assert sum(chk.by_file[str(path)].skipped.values()) == len(rows) - len(triples) > 0
    wrong = write_lines(tmp_path / "w.tsv", ["year\ten\ttr", "x\ty\tz"])
    with pytest.raises(InputFileError, match="expected header"):
        list(formats.read_wmt(wrong, "tr", [], checkers()))


def test_dictionaries_muse_and_freedict_real(mirror_dir, tmp_path):
    muse = formats.read_dictionary(mirror_dir / "dict/muse/full/en-de.txt", "de", 0, False, None, checkers())
    assert next(muse) == ("de", "the", "die")
    free = formats.read_dictionary(mirror_dir / "dict/freedict/freedict-eng-tur.tsv.gz", "tr", 0, True, 1, checkers())
    first = next(free)
    assert first[0] == "tr" and len(first[1].split()) == 1 and len(first[2].split()) == 1
    # original MUSE files separate the two words by a space; reversed files have English second
    path = write_lines(tmp_path / "de-en.txt", ["haus house", "katze cat"])
    assert list(formats.read_dictionary(path, "de", 1, False, None, checkers())) == [
        ("de", "house", "haus"),
        ("de", "cat", "katze"),
    ]
    phrases = write_lines(tmp_path / "phrases.tsv", ["en\tde", "house\tHaus", "good morning\tguten Morgen"])
    chk = checkers()
    assert list(formats.read_dictionary(phrases, "de", 0, True, 1, chk)) == [("de", "house", "Haus")]
    assert chk.by_file[str(phrases)].skipped == {"over 1 word(s)": 1}


def test_one_sided_opus_units_are_counted(tmp_path):
    path = write_lines(
        tmp_path / "de-en.raw.txt",
        [
            '(src)="1"> Hallo .',
            '(trg)="1"> Hello .',
            "<hr>",
            '(src)="2"> Nur Deutsch .',
            "<hr>",
            '(trg)="3"> Only English .',
        ],
    )
    chk = checkers()
    assert list(formats.read_opus_sample(path, "trg", "de", chk)) == [("de", "Hello .", "Hallo .")]
    assert chk.by_file[str(path)].skipped == {"one-sided unit": 2} and chk.by_file[str(path)].bad == 0


# ----------------------------------------------------------------- bad input


BAD_ROWS = [
    (b"Bad\xff\xfe bytes\tSchlecht", "invalid UTF-8"),
    (b"Nul\x00 byte\tNull", "NUL byte"),
    (b"Windows\tFenster\r", "CR LF line end"),
    (b"Three\tcolumns\there", "3 columns, expected 2"),
    (b"en\tde", "stray header row"),
]


@pytest.mark.parametrize("bad, reason", BAD_ROWS, ids=[r for _, r in BAD_ROWS])
def test_each_malformed_row_is_counted_quoted_and_skipped(tmp_path, bad, reason):
    lines = [b"One\tEins", bad, b"Two\tZwei", b"Three\tDrei"]
    path = write_lines(tmp_path / "pairs.tsv.gz", lines)
    chk = checkers(0.3)
    triples = list(formats.read_st_parallel(path, None, ["de"], chk))
    assert [t[1] for t in triples] == ["One", "Two", "Three"]
    summary = chk.by_file[str(path)].summary()
    assert summary["rows"] == 4 and summary["bad"] == 1 and summary["reasons"] == {reason: 1}
    assert summary["quotes"][0].startswith(f"{path}:2: {reason}")


def test_too_many_bad_rows_fail_naming_the_file(tmp_path):
    path = write_lines(tmp_path / "mostly-bad.tsv", [b"a\tb", b"x", b"y", b"c\td"])
    with pytest.raises(InputFileError) as info:
        list(formats.read_st_parallel(path, None, ["de"], checkers(0.25)))
    message = str(info.value)
    assert str(path) in message and "2 of 4 rows malformed" in message and "first at line 2: 1 columns" in message


def test_truncated_gzip_and_missing_file_fail_clearly(tmp_path, mirror_dir):
    data = (mirror_dir / "train/wmt-newstest/newstest.en-tr.tsv.gz").read_bytes()
    cut = tmp_path / "newstest.en-tr.tsv.gz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputFileError, match="truncated or corrupt gzip") as info:
        list(formats.read_wmt(cut, "tr", [], checkers()))
    assert str(cut) in str(info.value)
    with pytest.raises(InputFileError, match="not found"):
        list(formats.read_tatoeba(tmp_path / "nope.tsv.gz", "de", checkers()))


def test_crlf_file_fails_as_a_whole(tmp_path):
    path = write_lines(tmp_path / "dos.tsv", [b"a\tb\r", b"c\td\r"])
    with pytest.raises(InputFileError, match="CR LF"):
        list(formats.read_st_parallel(path, None, ["de"], checkers(0.01)))


def test_ted2020_header_problems_are_named(tmp_path):
    dos = write_lines(tmp_path / "ted-dos.tsv", [b"en\tde\r", b"Hello\tHallo\r"])
    with pytest.raises(InputFileError, match=r"ted-dos.tsv:1: unreadable header row \(.*CR LF"):
        list(formats.read_ted2020(dos, ["de"], checkers()))
    empty = write_lines(tmp_path / "ted-empty.tsv", [])
    with pytest.raises(InputFileError, match="empty"):
        list(formats.read_ted2020(empty, ["de"], checkers()))


def test_a_parallel_file_with_a_cell_longer_than_csvs_default_limit_is_read(tmp_path):
    """cleaning.max_chars: null lets a run-on line through; the stage that reads the file must not refuse it."""
    from xdistill.data.parallel_tsv import read_parallel_pairs, write_parallel_tsv

    long_line = "word " * 40_000  # 200,000 characters: past csv's 131,072 per cell
    write_parallel_tsv(tmp_path / "train.tsv.gz", [(long_line.strip(), "Wort.", "de", "x")])
    assert len(read_parallel_pairs(tmp_path / "train.tsv.gz").sources[0]) == len(long_line.strip())
