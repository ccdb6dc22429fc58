"""The file formats of every evaluation set: one reader (and writer) each, used by evaluation and decontamination.

What the benchmarks score and what the ``parallel`` stage removes from the training data
(:mod:`xdistill.data.decontaminate`) are read by the same functions here, so the two cannot drift.

- **STS17** (SemEval-2017 Task 1): ``STS.input.<track>.txt`` (``sentence1<TAB>sentence2``) and
  ``STS.gs.<track>.txt`` (one gold score 0-5 per line, empty = unscored).
- **STS Benchmark** (original release): ``sts-{train,dev,test}.csv``, tab-separated
  ``genre, file, year, id, score, sentence1, sentence2`` (some rows carry two trailing source fields).
- **stsb-multi-mt**: ``stsb-<lang>-<split>.csv``, CSV without header: ``sentence1,sentence2,score``.
- **Tatoeba** (LASER test set v1): ``tatoeba.<xxx>-eng.<xxx>`` and ``tatoeba.<xxx>-eng.eng``, line-aligned.
- **FLORES-200 devtest**: ``<code>.devtest``, the 1012 multi-way parallel sentences, one per line.
- **BUCC** (and the FLORES-built benchmark in its layout): ``<xx>-en.<split>.<xx>`` / ``.en``
  (``id<TAB>sentence``) and ``<xx>-en.<split>.gold`` (``xx_id<TAB>en_id``).

Every reader names the file and line of a problem (:class:`~xdistill.errors.InputFileError`).
"""

from __future__ import annotations

import csv
import fnmatch
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from xdistill.errors import InputFileError
from xdistill.io import atomic_path

FLORES_SENTENCES = 1012
STSB_MIN_FIELDS = 7  # genre, file, year, id, score, sentence1, sentence2


def _numbered_lines(path: Path, what: str) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of a UTF-8 file, split only at ``\\n`` (a trailing ``\\r`` is dropped)."""
    if not path.is_file():
        raise InputFileError(path, f"{what} not found")
    try:
        with path.open(encoding="utf-8", newline="\n") as handle:
            for number, line in enumerate(handle, start=1):
                yield number, line.rstrip("\n").removesuffix("\r")
    except UnicodeDecodeError:
        raise InputFileError(path, "not valid UTF-8", _first_invalid_utf8_line(path)) from None


def _first_invalid_utf8_line(path: Path) -> int | None:
    """The line of the first byte that is not UTF-8 (text decoders work on blocks: their error's offset is
    within a block, not the file)."""
    data = path.read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as whole:
        return data[: whole.start].count(b"\n") + 1
    return None


# ---------------------------------------------------------------- STS17


def read_sts_input(path: Path) -> list[tuple[str, str]]:
    """An STS input file: ``sentence1<TAB>sentence2`` per line."""
    pairs = []
    for number, line in _numbered_lines(Path(path), "STS input file"):
        fields = line.split("\t")
        if len(fields) != 2:
            raise InputFileError(path, f"expected 2 tab-separated sentences, found {len(fields)} field(s)", number)
        pairs.append((fields[0], fields[1]))
    return pairs


def _score(path: Path, text: str, number: int) -> float:
    """A gold similarity score of any STS format: a number in 0-5 (NaN or inf would turn a whole set's
    Spearman into NaN, and the averages would drop the set without a word)."""
    try:
        score = float(text)
    except ValueError:
        raise InputFileError(path, f"gold score is not a number: {text[:40]!r}", number) from None
    if not 0.0 <= score <= 5.0:
        raise InputFileError(path, f"gold score {text.strip()[:40]} outside 0-5", number)
    return score


def read_sts_gold(path: Path) -> list[float | None]:
    """An STS gold file: one score (0-5) per line; an empty line is an unscored pair (None)."""
    scores: list[float | None] = []
    for number, line in _numbered_lines(Path(path), "STS gold file"):
        text = line.strip()
        if not text:
            scores.append(None)
            continue
        scores.append(_score(path, text, number))
    return scores


# ---------------------------------------------------------------- STS Benchmark and stsb-multi-mt


@dataclass(frozen=True)
class STSbRow:
    sentence1: str
    sentence2: str
    score: float


def read_stsbenchmark(path: Path) -> list[STSbRow]:
    """An original STS Benchmark file (tab-separated, the sentences in fields 6 and 7)."""
    path = Path(path)
    rows = []
    for number, line in _numbered_lines(path, "STS Benchmark file"):
        fields = line.split("\t")
        if len(fields) < STSB_MIN_FIELDS:
            raise InputFileError(
                path,
                f"expected at least {STSB_MIN_FIELDS} tab-separated fields "
                f"(genre, file, year, id, score, sentence1, sentence2), found {len(fields)}",
                number,
            )
        rows.append(STSbRow(fields[5], fields[6], _score(path, fields[4], number)))
    return rows


def read_stsb_multi_mt(path: str | Path) -> list[STSbRow]:
    """A stsb-multi-mt CSV file: no header, ``sentence1,sentence2,score``, quoted fields with commas."""
    path = Path(path)
    if not path.is_file():
        raise InputFileError(path, "stsb-multi-mt file not found")
    rows = []
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            reader = csv.reader(handle)
            while True:
                start = reader.line_num + 1  # errors name the line the row starts on
                try:
                    fields = next(reader)
                except StopIteration:
                    break
                except csv.Error as exc:
                    raise InputFileError(path, f"malformed CSV ({exc}); an unclosed quote?", start) from None
                if len(fields) != 3:
                    # a quote left open swallows the lines after it into one field
                    spans = (
                        f"; the row runs on to line {reader.line_num}: an unclosed quote?"
                        if reader.line_num > start
                        else ""
                    )
                    raise InputFileError(
                        path, f"expected 3 CSV fields (sentence1, sentence2, score), found {len(fields)}{spans}", start
                    )
                rows.append(STSbRow(fields[0], fields[1], _score(path, fields[2], start)))
    except UnicodeDecodeError:
        raise InputFileError(path, "not valid UTF-8", _first_invalid_utf8_line(path)) from None
    if not rows:
        raise InputFileError(path, "empty file")
    return rows


def check_rows_aligned(english: list[STSbRow], translated: list[STSbRow], path: Path) -> None:
    """Fail unless ``translated`` (read from ``path``) is row by row a translation of ``english``.

    stsb-multi-mt files carry no ids; rows of one split are aligned across languages by position,
    which the gold scores (identical in every language) confirm.
    """
    if len(translated) != len(english):
        raise InputFileError(path, f"{len(translated)} rows, but the English file of its split has {len(english)}")
    for number, (en_row, xx_row) in enumerate(zip(english, translated), start=1):
        if abs(en_row.score - xx_row.score) > 1e-6:
            raise InputFileError(
                path,
                f"score {xx_row.score} differs from the English row's {en_row.score}: rows are not aligned",
                number,
            )


# ---------------------------------------------------------------- Tatoeba


def tatoeba_paths(tatoeba_dir: str | Path, code: str) -> tuple[Path, Path]:
    """The (non-English, English) files of one Tatoeba language (ISO 639-3 ``code``)."""
    folder = Path(tatoeba_dir)
    return folder / f"tatoeba.{code}-eng.{code}", folder / f"tatoeba.{code}-eng.eng"


def read_sentence_lines(path: Path) -> list[str]:
    """A one-sentence-per-line file (Tatoeba): every line, empty ones included (they keep the alignment)."""
    return [line for _, line in _numbered_lines(Path(path), "sentence file")]


def read_tatoeba_pairs(tatoeba_dir: str | Path, code: str, max_pairs: int | None = None) -> tuple[list[str], list[str]]:
    """The ``(xx sentences, English sentences)`` of one language, line-aligned, the first ``max_pairs``;
    empty files are refused."""
    xx_path, en_path = tatoeba_paths(tatoeba_dir, code)
    xx_lines = read_sentence_lines(xx_path)
    en_lines = read_sentence_lines(en_path)
    if len(xx_lines) != len(en_lines):
        raise InputFileError(xx_path, f"{len(xx_lines)} lines, but {en_path.name} has {len(en_lines)}")
    if not xx_lines:  # here, where the files are known: retrieval accuracy would refuse zero pairs unnamed
        raise InputFileError(xx_path, f"no sentences (nor in {en_path.name}): nothing to score")
    if max_pairs is not None:
        xx_lines, en_lines = xx_lines[:max_pairs], en_lines[:max_pairs]
    return xx_lines, en_lines


# ---------------------------------------------------------------- FLORES-200


def read_flores(path: Path) -> list[str]:
    """The 1012 sentences of one devtest file (checked: count, no empty line, no tab)."""
    path = Path(path)
    lines = [line for _, line in _numbered_lines(path, "FLORES-200 devtest file")]
    if len(lines) != FLORES_SENTENCES:
        raise InputFileError(path, f"expected {FLORES_SENTENCES} lines (FLORES-200 devtest), found {len(lines)}")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            raise InputFileError(path, "empty sentence", number)
        if "\t" in line:
            raise InputFileError(path, "sentence contains a tab", number)
    return [line.strip() for line in lines]


# ---------------------------------------------------------------- BUCC layout


def bucc_paths(folder: str | Path, language: str, split: str) -> dict[str, Path]:
    """The three files of one language and split in the BUCC layout."""
    stem = f"{language}-en.{split}"
    folder = Path(folder)
    return {"xx": folder / f"{stem}.{language}", "en": folder / f"{stem}.en", "gold": folder / f"{stem}.gold"}


def _tab_lines(path: Path) -> Iterator[tuple[int, list[str]]]:
    """Non-empty lines of a UTF-8 file split on tabs, with 1-based line numbers."""
    for number, line in _numbered_lines(Path(path), "file"):
        if line.strip():
            yield number, line.split("\t")


def read_id_sentences(path: str | Path) -> tuple[list[str], list[str]]:
    """Read ``id<TAB>sentence`` lines; ids must be unique and both fields non-empty."""
    ids: list[str] = []
    sentences: list[str] = []
    seen: set[str] = set()
    for number, fields in _tab_lines(Path(path)):
        if len(fields) != 2:
            raise InputFileError(
                path, f"expected 'id<TAB>sentence', found {len(fields)} tab-separated field(s)", number
            )
        sentence_id, sentence = fields[0].strip(), fields[1].strip()
        if not sentence_id:
            raise InputFileError(path, "empty sentence id", number)
        if not sentence:
            raise InputFileError(path, f"empty sentence for id {sentence_id!r}", number)
        if sentence_id in seen:
            raise InputFileError(path, f"duplicate sentence id {sentence_id!r}", number)
        seen.add(sentence_id)
        ids.append(sentence_id)
        sentences.append(sentence)
    return ids, sentences


def read_bucc_gold(path: str | Path, xx_ids: Iterable[str], en_ids: Iterable[str]) -> set[tuple[str, str]]:
    """Read ``xx_id<TAB>en_id`` gold lines, checking that both ids exist."""
    known_xx, known_en = set(xx_ids), set(en_ids)
    gold: set[tuple[str, str]] = set()
    for number, fields in _tab_lines(Path(path)):
        if len(fields) != 2 or not fields[0].strip() or not fields[1].strip():
            raise InputFileError(path, "expected 'xx_id<TAB>en_id' with two non-empty ids", number)
        xx_id, en_id = fields[0].strip(), fields[1].strip()
        if xx_id not in known_xx:
            raise InputFileError(path, f"gold id {xx_id!r} is not in the non-English sentence file", number)
        if en_id not in known_en:
            raise InputFileError(path, f"gold id {en_id!r} is not in the English sentence file", number)
        gold.add((xx_id, en_id))
    return gold


def write_id_sentences(path: Path, ids: Iterable[str], sentences: Iterable[str]) -> None:
    """Write ``id<TAB>sentence`` lines atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text("".join(f"{i}\t{s}\n" for i, s in zip(ids, sentences)), encoding="utf-8")


def write_bucc_gold(path: Path, pairs: Iterable[tuple[str, str]]) -> int:
    """Write ``xx_id<TAB>en_id`` lines (sorted) atomically; returns their number."""
    lines = sorted(f"{xx_id}\t{en_id}\n" for xx_id, en_id in pairs)
    with atomic_path(path) as tmp:
        tmp.write_text("".join(lines), encoding="utf-8")
    return len(lines)


# ---------------------------------------------------------------- every set's sentences (decontamination)


def _sts17_sentences(path: Path) -> Iterator[str]:
    for pair in read_sts_input(path):
        yield from pair


def _stsb_sentences(rows: list[STSbRow]) -> Iterator[str]:
    for row in rows:
        yield row.sentence1
        yield row.sentence2


def _bucc_sentences(path: Path) -> Iterator[str]:
    yield from read_id_sentences(path)[1]


SentenceReader = Callable[[Path], Iterable[str]]

# (folder glob under eval/, file glob inside it (recursive), the sentences of one file)
EVALUATION_SETS: list[tuple[str, str, SentenceReader]] = [
    ("sts17", "STS.input.*.txt", _sts17_sentences),
    ("stsb", "sts-*.csv", lambda path: _stsb_sentences(read_stsbenchmark(path))),
    ("stsb-multi-mt", "stsb-*.csv", lambda path: _stsb_sentences(read_stsb_multi_mt(path))),
    ("tatoeba-laser", "tatoeba.*-eng.*", read_sentence_lines),
    ("flores200-devtest", "*.devtest", read_flores),
    ("bucc*", "*-en.*.*", _bucc_sentences),
]


def is_decontaminated_bucc_folder(eval_dir: Path, folder: Path) -> bool:
    """Whether :func:`evaluation_files` reads ``folder``: a ``bucc*`` folder right inside ``eval_dir``
    (BUCC files anywhere else are never kept out of the training data)."""
    bucc_glob = next(folder_glob for folder_glob, _, reader in EVALUATION_SETS if reader is _bucc_sentences)
    folder = Path(os.path.abspath(folder))
    return folder.parent.resolve() == Path(eval_dir).resolve() and fnmatch.fnmatch(folder.name, bucc_glob)


def is_train_split(path: Path) -> bool:
    """The STS Benchmark's train split (``sts-train.csv``) or a stsb-multi-mt translation of it."""
    return path.name.endswith("-train.csv")


def evaluation_files(raw_dir: str | Path, train_splits: bool = True) -> list[tuple[Path, SentenceReader]]:
    """Every evaluation file staged under ``raw_dir/eval`` with the function that reads its sentences.

    ``train_splits=False`` leaves out the STS Benchmark's train split (English and stsb-multi-mt): no
    benchmark scores it (the evaluation reads test, checkpoint selection dev), so a source may train on it.
    """
    eval_dir = Path(raw_dir) / "eval"
    found = []
    for folder_glob, file_glob, reader in EVALUATION_SETS:
        for folder in sorted(eval_dir.glob(folder_glob)):
            found += [
                (p, reader)
                for p in sorted(folder.rglob(file_glob))
                if p.is_file() and not p.name.endswith(".gold") and (train_splits or not is_train_split(p))
            ]
    return found
