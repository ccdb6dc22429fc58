"""The sentences of every evaluation set the project knows, normalised: none may be trained on.

Read from the staged ``data/raw/eval`` tree (whatever the ``corpora`` stage put there):
STS17 (both sentences of every track), STS Benchmark and stsb-multi-mt (all splits staged),
the LASER Tatoeba test set (both sides, every language), FLORES-200 devtest (which the BUCC-style
mining benchmark is built from), and BUCC files (``{xx}-en.{split}.{lang}``, ``id<TAB>sentence``)
when a user stages them under ``eval/bucc*``.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

from xdistill.data.normalize import normalize_text
from xdistill.errors import InputFileError

log = logging.getLogger(__name__)


def _lines(path: Path) -> Iterator[str]:
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            yield from (line.rstrip("\r\n") for line in handle)
    except UnicodeDecodeError as exc:
        raise InputFileError(path, f"evaluation file is not valid UTF-8: {exc}") from exc


def _sts17(path: Path) -> Iterator[str]:
    for line in _lines(path):
        yield from line.split("\t")[:2]


def _stsb(path: Path) -> Iterator[str]:
    # genre, file, year, id, score, sentence1, sentence2 (a few rows carry extra trailing fields)
    for line in _lines(path):
        cells = line.split("\t")
        if len(cells) >= 7:
            yield cells[5]
            yield cells[6]


def _stsb_multi_mt(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8", newline="") as handle:
        for row in csv.reader(handle):
            yield from row[:2]


def _one_per_line(path: Path) -> Iterator[str]:
    yield from _lines(path)


def _bucc(path: Path) -> Iterator[str]:
    for line in _lines(path):
        yield line.split("\t", 1)[-1]


# (folder glob under eval/, file glob inside it (recursive), parser)
EVALUATION_SETS: list[tuple[str, str, Callable[[Path], Iterator[str]]]] = [
    ("sts17", "STS.input.*.txt", _sts17),
    ("stsb", "sts-*.csv", _stsb),
    ("stsb-multi-mt", "stsb-*.csv", _stsb_multi_mt),
    ("tatoeba-laser", "tatoeba.*-eng.*", _one_per_line),
    ("flores200-devtest", "*.devtest", _one_per_line),
    ("bucc*", "*-en.*.*", _bucc),
]


def evaluation_files(raw_dir: str | Path) -> list[tuple[Path, Callable[[Path], Iterator[str]]]]:
    """Every evaluation file staged under ``raw_dir/eval`` with the parser for its format."""
    eval_dir = Path(raw_dir) / "eval"
    found = []
    for folder_glob, file_glob, parser in EVALUATION_SETS:
        for folder in sorted(eval_dir.glob(folder_glob)):
            found += [(p, parser) for p in sorted(folder.rglob(file_glob)) if p.is_file() and not p.name.endswith(".gold")]
    return found


def evaluation_sentences(raw_dir: str | Path) -> set[str]:
    """Normalised (:func:`normalize_text`) sentences of every evaluation set staged in ``raw_dir``."""
    sentences: set[str] = set()
    files = evaluation_files(raw_dir)
    for path, parser in files:
        sentences.update(normalize_text(s) for s in parser(path))
    sentences.discard("")
    log.info("decontamination: %d distinct evaluation sentences from %d files", len(sentences), len(files))
    return sentences
