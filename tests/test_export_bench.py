"""The benchmark ``python -m bench.perf.export`` runs end to end at its tiny size on a one-layer mE5 student
(timings not asserted)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lightweight_helpers import tatoeba_pairs, tiny_e5_student, write_parallel
from tests.trainer_helpers import mirror_dir
from xdistill.training.student import save_student

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow  # the whole benchmark script end to end (about 70 s)
def test_bench_export_tiny_reports_trimming_and_every_export(tmp_path: Path) -> None:
    student = save_student(tiny_e5_student(), tmp_path / "student")
    pairs = {lang: tatoeba_pairs(lang, 30) for lang in ("de", "tr")}
    write_parallel(tmp_path / "parallel/train.tsv.gz", pairs)
    write_parallel(tmp_path / "parallel/dev.tsv.gz", {lang: rows[:5] for lang, rows in pairs.items()})
    # the staged eval sets of the two languages only (the whole mirror's are ~50x more text to trim over)
    eval_dir = tmp_path / "raw" / "eval"
    shutil.copytree(mirror_dir() / "eval" / "sts17", eval_dir / "sts17")
    (eval_dir / "tatoeba-laser").mkdir()
    for code in ("deu", "tur"):
        for side in (code, "eng"):
            name = f"tatoeba.{code}-eng.{side}"
            shutil.copy(mirror_dir() / "eval" / "tatoeba-laser" / name, eval_dir / "tatoeba-laser" / name)
    rows_file = tmp_path / "rows.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.perf.export",
            "--tiny",
            "--student",
            str(student),
            "--parallel-dir",
            str(tmp_path / "parallel"),
            "--raw-dir",
            str(tmp_path / "raw"),
            "--languages",
            "de",
            "tr",
            "--work-dir",
            str(tmp_path),
            "--json",
            str(rows_file),
            "--light",
            f"the untrimmed student={student}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    trimming, *exports = json.loads(rows_file.read_text())
    assert trimming["details"]["trimmed"]["parameters"] < trimming["details"]["full"]["parameters"] - 50_000_000
    assert trimming["details"]["trimmed"]["disk_mb"] < trimming["details"]["full"]["disk_mb"] / 2
    assert [row["details"]["backend"] for row in exports] == [
        "torch",
        "torch",
        "onnx",
        "onnx-int8",
        "torch",
        "onnx-int8",
    ]
    assert "the untrimmed student, PyTorch fp32" in exports[4]["benchmark"]  # a --light student as trained
    assert all(abs(delta) < 0.2 for delta in exports[4]["details"]["deltas"].values())  # it is the reference itself
    assert "the untrimmed student, ONNX dynamic int8" in exports[5]["benchmark"]  # ... and its own export
    assert all(abs(delta) < 5 for delta in exports[5]["details"]["deltas"].values())
    for row in exports[:3]:  # trimming (the eval sets are in its corpus), fp16 and fp32 ONNX keep the scores
        assert all(abs(delta) < 0.2 for delta in row["details"]["deltas"].values()), row
    assert all(abs(delta) < 5 for delta in exports[3]["details"]["deltas"].values())
    assert exports[3]["details"]["disk_mb"] < exports[2]["details"]["disk_mb"]


@pytest.mark.slow
def test_bench_export_tatoeba_all_compares_the_trimmed_vocabulary_per_language_group(tmp_path: Path) -> None:
    student = save_student(tiny_e5_student(), tmp_path / "student")
    pairs = {"de": tatoeba_pairs("de", 30)}
    write_parallel(tmp_path / "parallel/train.tsv.gz", pairs)
    write_parallel(tmp_path / "parallel/dev.tsv.gz", {"de": pairs["de"][:5]})
    (tmp_path / "raw" / "eval" / "tatoeba-laser").mkdir(parents=True)
    for side in ("deu", "eng"):  # German is the configured language: its test set is staged
        name = f"tatoeba.deu-eng.{side}"
        shutil.copy(mirror_dir() / "eval" / "tatoeba-laser" / name, tmp_path / "raw" / "eval" / "tatoeba-laser" / name)
    rows_file = tmp_path / "rows.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.perf.export",
            "tatoeba-all",
            "--tiny",
            "--base",
            str(student),
            "--parallel-dir",
            str(tmp_path / "parallel"),
            "--raw-dir",
            str(tmp_path / "raw"),
            "--languages",
            "de",
            "--codes",
            "deu",
            "ell",
            "--max-pairs",
            "40",
            "--work-dir",
            str(tmp_path / "out"),
            "--json",
            str(rows_file),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    every, configured, other = json.loads(rows_file.read_text())
    assert every["details"]["languages"] == ["deu", "ell"] and "all 2 languages" in every["benchmark"]
    # German tokenises to the same pieces after trimming: the very same accuracy
    assert configured["details"]["languages"] == ["deu"] and configured["passed"] is True
    assert configured["details"]["trimmed"] == configured["details"]["full"]
    # Greek's script is absent from the German/English corpus: its pieces are gone and it loses
    assert other["details"]["languages"] == ["ell"] and other["passed"] is None
    assert other["details"]["trimmed"] < other["details"]["full"]
    assert (tmp_path / "out" / "e5-untrained-trimmed.json").is_file()
