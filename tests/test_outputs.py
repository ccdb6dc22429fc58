"""No output destroys data: `-o` naming an input is refused, `export` replaces only an earlier export (with
--force), and an unwritable destination fails before any model is loaded (the refusals below all come before
the model spec, which names no model, is resolved)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from xdistill.cli.main import main
from xdistill.errors import XdistillError
from xdistill.export.files import REPORT_FILE
from xdistill.export.writer import export_student
from xdistill.outputs import check_output_file, check_writable

NO_MODEL = "pypi:no-such-model"  # resolving it would fail: a refusal must come first


@pytest.fixture()
def text(tmp_path: Path) -> Path:
    path = tmp_path / "sentences.txt"
    path.write_text("one\ntwo\n", encoding="utf-8")
    return path


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str], message: str) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_encode_refuses_to_write_over_its_input(text: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _refused(["encode", str(text), "--model", NO_MODEL, "-o", str(text)], capsys, "is also an input")
    assert text.read_text(encoding="utf-8") == "one\ntwo\n"


def test_mine_refuses_to_write_over_either_input(text: Path, tmp_path: Path, capsys) -> None:
    other = tmp_path / "other.txt"
    other.write_text("eins\nzwei\n", encoding="utf-8")
    for target in (text, other):
        _refused(["mine", str(text), str(other), "--model", NO_MODEL, "-o", str(target)], capsys, "is also an input")
    assert other.read_text(encoding="utf-8") == "eins\nzwei\n"


def test_search_refuses_to_write_over_its_index(text: Path, tmp_path: Path, capsys) -> None:
    index = tmp_path / "index.npy"
    np.save(index, np.eye(2, dtype=np.float32))
    before = index.read_bytes()
    _refused(["search", str(text), "--index", str(index), "--model", NO_MODEL, "-o", str(index)], capsys, "input")
    assert index.read_bytes() == before


def test_an_output_inside_a_model_folder_is_refused(text: Path, tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    with pytest.raises(XdistillError, match="inside the input folder"):
        check_output_file(model / "vectors.npy", [text, model])


def test_an_output_below_a_file_is_refused_before_work(text: Path, tmp_path: Path, capsys) -> None:
    _refused(["encode", str(text), "--model", NO_MODEL, "-o", str(text / "out.npy")], capsys, "is a file, not a folder")


UNWRITABLE = Path("/proc/xdistill-test")  # /proc takes no new file, for root too (os.access tells root yes)


@pytest.mark.parametrize("command", ["encode", "search", "mine", "export"])
def test_an_unwritable_destination_is_refused_before_work_even_for_root(
    command: str, text: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The check writes a probe file: it fails for every user, in a second, before the model spec (which names no
    model) is resolved or the (empty) student folder is read, and nothing is left behind."""
    import time

    index, student = tmp_path / "index.npy", tmp_path / "student"
    np.save(index, np.eye(2, dtype=np.float32))
    student.mkdir()
    argv = {
        "encode": ["encode", str(text), "--model", NO_MODEL, "--no-progress", "-o", str(UNWRITABLE / "out.npy")],
        "search": ["search", str(text), "--index", str(index), "--model", NO_MODEL, "-o", str(UNWRITABLE / "h.tsv")],
        "mine": ["mine", str(text), str(text), "--model", NO_MODEL, "-o", str(UNWRITABLE / "pairs.tsv")],
        "export": ["export", str(student), "--formats", "fp16", "-o", str(UNWRITABLE / "export")],
    }[command]
    assert main(argv) == 2  # the first run imports the command's modules; the second is timed
    err = capsys.readouterr().err
    started = time.monotonic()
    assert main(argv) == 2
    assert time.monotonic() - started < 3 and capsys.readouterr().err == err
    assert f"error: {UNWRITABLE}/" in err and "the folder /proc is not writable" in err and "Traceback" not in err
    assert not UNWRITABLE.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.npy", "sentences.txt", "student"]  # nothing new


def test_the_write_probe_leaves_nothing_behind(tmp_path: Path) -> None:
    (tmp_path / "kept.txt").write_text("x", encoding="utf-8")
    check_writable(tmp_path / "new" / "out.npy")  # the nearest existing folder is probed; none is made
    assert [p.name for p in tmp_path.iterdir()] == ["kept.txt"]


def test_an_output_that_is_a_folder_is_refused(text: Path, tmp_path: Path) -> None:
    with pytest.raises(XdistillError, match="is a folder"):
        check_output_file(tmp_path, [text])


def test_export_keeps_a_folder_it_did_not_write(tmp_path: Path, capsys) -> None:
    student, target = tmp_path / "student", tmp_path / "mine"
    student.mkdir()
    target.mkdir()
    (target / "notes.txt").write_text("keep me", encoding="utf-8")
    for extra in ([], ["--force"]):
        _refused(["export", str(student), "-o", str(target), *extra], capsys, "not an earlier export")
    assert (target / "notes.txt").read_text(encoding="utf-8") == "keep me"


def test_export_replaces_an_earlier_export_only_with_force(tmp_path: Path) -> None:
    student, target = tmp_path / "student", tmp_path / "export"
    student.mkdir()
    target.mkdir()
    (target / REPORT_FILE).write_text("{}", encoding="utf-8")
    with pytest.raises(XdistillError, match="pass --force"):
        export_student(student, target, ["fp16"])
    # with --force the destination is accepted: the next check is the (empty) student folder itself
    with pytest.raises(XdistillError) as refused:
        export_student(student, target, ["fp16"], force=True)
    assert "earlier export" not in str(refused.value)
    assert (target / REPORT_FILE).is_file()


def _read_only_destination(tmp_path: Path) -> Path:
    """A folder no write may enter: ``chmod 555`` for a user, ``/sys`` for root (whom permissions do not stop, but
    whom ``os.access`` still answers yes for: the check's probe write finds it out)."""
    import os

    if os.geteuid() != 0:
        folder = tmp_path / "read-only"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    folder = Path("/sys")
    probe = folder / "xdistill-write-probe"
    try:
        probe.mkdir()
    except OSError:
        return folder
    probe.rmdir()
    pytest.skip("/sys is writable here: no read-only folder to write into as root")


@pytest.mark.parametrize("command", ["encode", "search", "mine", "export"])
def test_a_read_only_destination_is_an_error_naming_it_not_a_traceback(
    command: str, text: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = "pypi:all-minilm-l6-v2"
    folder = _read_only_destination(tmp_path)
    index = tmp_path / "index.npy"
    np.save(index, np.eye(2, 384, dtype=np.float32))
    argv = {
        "encode": ["encode", str(text), "--model", model, "--no-progress", "-o", str(folder / "out.npy")],
        "search": ["search", str(text), "--index", str(index), "--model", model, "-o", str(folder / "hits.tsv")],
        "mine": ["mine", str(text), str(text), "--model", model, "--no-progress", "-o", str(folder / "pairs.tsv")],
        "export": ["export", _minilm(), "--formats", "fp16", "-o", str(folder / "export")],
    }[command]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"error: {folder}/" in err and ("not writable" in err or "cannot be written" in err)
    assert "Traceback" not in err


def _minilm() -> str:
    from xdistill.models import resolve_model_dir

    return str(resolve_model_dir("pypi:all-minilm-l6-v2"))
