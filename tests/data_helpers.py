"""Helpers for the data tests: tiny hand-made corpora files and small real subsets of the mirror."""

from __future__ import annotations

import gzip
from pathlib import Path

from xdistill.data.corpora import stage_corpora

# A small real evaluation subset: two STS17 tracks and the German LASER Tatoeba files.
TINY_EVAL_DATASETS = {
    "eval/sts17": ["STS2017.eval.v1.1/STS.input.track5.en-en.txt", "STS2017.eval.v1.1/STS.input.track1.ar-ar.txt"],
    "eval/tatoeba-laser": ["tatoeba.{lang3}-eng.{lang3}", "tatoeba.{lang3}-eng.eng"],
}


def write_lines(path: Path, lines: list[str] | list[bytes], gz: bool | None = None) -> Path:
    """Write lines (str or raw bytes, newline added) to ``path``, gzipped if it ends with .gz."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = b"".join((line if isinstance(line, bytes) else line.encode("utf-8")) + b"\n" for line in lines)
    gz = path.name.endswith(".gz") if gz is None else gz
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def stage_tiny_raw(
    raw_dir: Path, mirror: Path, languages: list[str], datasets: dict[str, list[str]] | None = None
) -> dict:
    """Stage a small real subset of the mirror (evaluation files + ``datasets``) into ``raw_dir``."""
    return stage_corpora(raw_dir, {**TINY_EVAL_DATASETS, **(datasets or {})}, languages, mirror)


def read_tsv_gz(path: Path) -> list[list[str]]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n").split("\t") for line in handle]
