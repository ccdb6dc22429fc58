"""Vector files say what they hold: ``encode`` writes ``<file>.npy.json``, and ``search`` refuses queries of another
space than its index's, naming both files; an index without a sidecar is still searched, with a warning.

Real models: the MiniLM teacher and a student (MiniLM with nudged weights) carrying a teacher-space adapter.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from tests.student_helpers import TEACHER, nudged_student
from xdistill.cli.main import main
from xdistill.errors import InputFileError, XdistillError
from xdistill.vectors import (
    OWN_SPACE,
    TEACHER_SPACE,
    VectorsInfo,
    check_same_space,
    read_sidecar,
    same_space,
    sidecar_path,
    write_sidecar,
)

QUERIES = ["Wo ist der Bahnhof?", "Das Wetter ist schön."]
CORPUS = ["Where is the station?", "The weather is nice.", "Markets fell sharply."]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The student, the text files, and the three indexes: the teacher's, the student's own, its teacher-space."""
    root = tmp_path_factory.mktemp("sidecar")
    student = nudged_student(root / "student")
    queries, corpus = root / "queries.de", root / "corpus.en"
    queries.write_text("\n".join(QUERIES) + "\n", encoding="utf-8")
    corpus.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    made = {"root": root, "student": student, "queries": queries, "corpus": corpus}
    for name, model, extra in (
        ("teacher", TEACHER, []),
        ("own", str(student), []),
        ("teacher_space", str(student), ["--teacher-space"]),
    ):
        made[name] = root / f"{name}.npy"
        argv = ["encode", str(corpus), "--model", model, "-o", str(made[name]), "--no-progress", *extra]
        assert main(argv) == 0
    return made


def _search(files: dict[str, Path], index: str, *extra: str) -> int:
    out = files["root"] / f"hits-{index}.tsv"
    argv = ["search", str(files["queries"]), "--index", str(files[index]), "--model", str(files["student"])]
    return main([*argv, "-k", "1", "-o", str(out), *extra])


def test_encode_writes_what_the_vectors_are_beside_them(files: dict[str, Path]) -> None:
    sidecar = json.loads(sidecar_path(files["teacher_space"]).read_text(encoding="utf-8"))
    assert sidecar["format"] == "xdistill-vectors" and sidecar["version"] == 1
    assert sidecar["model"] == str(files["student"]) and sidecar["space"] == TEACHER_SPACE
    assert sidecar["space_id"].startswith(TEACHER + "@") and sidecar["model_id"].startswith(str(files["student"]) + "@")
    assert sidecar["dimension"] == 384 and sidecar["normalised"] is True and sidecar["rows"] == len(CORPUS)
    teacher = read_sidecar(files["teacher"])
    assert teacher is not None and teacher.space == OWN_SPACE and teacher.space_id == teacher.model_id
    # the student's teacher-space vectors and the teacher's own lie in one space
    assert same_space(teacher.space_id, sidecar["space_id"])


def test_a_teacher_space_index_with_student_space_queries_is_refused_naming_both_files(files, capsys) -> None:
    assert _search(files, "teacher_space") == 2
    err = capsys.readouterr().err
    assert str(files["teacher_space"]) in err and str(files["queries"]) in err
    assert "add --teacher-space" in err and "Traceback" not in err
    assert not (files["root"] / "hits-teacher_space.tsv").exists()
    assert _search(files, "teacher_space", "--teacher-space") == 0


def test_a_teacher_index_with_the_students_own_vectors_is_refused(files, capsys) -> None:
    assert _search(files, "teacher") == 2
    assert "--teacher-space" in capsys.readouterr().err
    assert _search(files, "teacher", "--teacher-space") == 0


def test_the_students_own_index_with_teacher_space_queries_is_refused(files, capsys) -> None:
    assert _search(files, "own", "--teacher-space") == 2
    assert "drop --teacher-space" in capsys.readouterr().err
    assert _search(files, "own") == 0


def test_an_index_without_a_sidecar_is_searched_with_a_warning(files, caplog) -> None:
    bare = files["root"] / "bare.npy"
    np.save(bare, np.load(files["teacher_space"]))
    files = {**files, "bare": bare}
    with caplog.at_level(logging.WARNING, logger="xdistill.vectors"):
        assert _search(files, "bare") == 0  # unchecked: the wrong space, but nothing says so
    assert any("has no sidecar" in record.getMessage() for record in caplog.records)


def test_a_sidecar_of_another_matrix_is_refused(files, tmp_path: Path, capsys) -> None:
    index = tmp_path / "index.npy"
    np.save(index, np.load(files["teacher"])[:2])  # the .npy replaced, its sidecar left as it was
    sidecar_path(index).write_bytes(sidecar_path(files["teacher"]).read_bytes())
    argv = ["search", str(files["queries"]), "--index", str(index), "--model", TEACHER, "-o", str(tmp_path / "h")]
    assert main(argv) == 2
    assert "the sidecar belongs to an earlier file" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "unreadable vector sidecar"),
        ('{"format": "other"}', "not an xdistill vector sidecar"),
        ('{"format": "xdistill-vectors", "version": 1, "model": "m"}', "unreadable vector sidecar"),
        (
            '{"format": "xdistill-vectors", "version": 1, "model": "m", "model_id": "m@1", "space": "moon", '
            '"space_id": "m@1", "dimension": 3}',
            "unknown vector space 'moon'",
        ),
    ],
)
def test_a_damaged_sidecar_is_named(tmp_path: Path, content: str, problem: str) -> None:
    index = tmp_path / "v.npy"
    np.save(index, np.eye(3, dtype=np.float32))
    sidecar_path(index).write_text(content, encoding="utf-8")
    with pytest.raises(InputFileError, match=problem) as caught:
        read_sidecar(index)
    assert caught.value.path == sidecar_path(index)


def test_the_space_check_compares_digests_where_both_have_one(tmp_path: Path) -> None:
    own = VectorsInfo("models/student", "models/student@abc", OWN_SPACE, "models/student@abc", 384)
    same_weights = VectorsInfo("models:/s/3", "models:/s/3@abc", OWN_SPACE, "models:/s/3@abc", 384)
    write_sidecar(tmp_path / "i.npy", own)
    assert read_sidecar(tmp_path / "i.npy") == own
    check_same_space(tmp_path / "i.npy", own, tmp_path / "q.txt", same_weights)  # one model named two ways
    other = VectorsInfo("models:/s/4", "models:/s/4@def", OWN_SPACE, "models:/s/4@def", 384)
    with pytest.raises(XdistillError, match="the two spaces differ"):
        check_same_space(tmp_path / "i.npy", own, tmp_path / "q.txt", other)
