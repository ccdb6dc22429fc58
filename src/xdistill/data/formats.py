"""Streaming readers for every parallel-data format the project trains on.

Every reader yields ``(lang, english, translation)`` triples, reading gzip or plain text line by
line (memory does not grow with the file). Malformed rows -- wrong column count, invalid UTF-8, NUL
bytes, CR LF line ends, a header row where none belongs -- are counted per file by a
:class:`RowChecker`, a few are quoted with ``file:line``, and skipped; when more than
``max_bad_share`` of a file's rows are bad the reader raises :class:`InputFileError` naming the file.

Formats (the ``format`` key of a ``parallel.sources`` entry):

- ``ted2020``: the sentence-transformers TED2020 TSV: a header row of language codes, one aligned
  unit per row, empty cells where a talk has no translation, no quoting.
- ``st_parallel``: the generic sentence-transformers parallel TSV: column 1 the English sentence,
  columns 2..n translations (languages from ``columns``, or the file's ``{lang}``).
- ``opus_sample``: OPUS alignment listings (``(src)="1"> ...`` / ``(trg)="1"> ...`` blocks separated
  by ``<hr>``; multi-sentence units joined with a space), as in the OPUS website bitext samples.
- ``moses``: line-aligned file pairs (Moses / OPUS ``.en`` + ``.xx``; Multi30k).
- ``tatoeba``: Tatoeba Challenge TSV ``en, xx, label`` with a header.
- ``wmt``: WMT newstest TSV ``testset, en, xx`` with a header (``exclude_testsets`` drops rows).
- ``stsb_multi_mt``: a stsb-multi-mt CSV split (``sentence1,sentence2,score``) and its English file:
  rows aligned by position (checked through the gold scores), both sentences of a row become pairs;
  the scores are not used. Parsed by :mod:`xdistill.data.eval_formats`, which owns the format.
- ``dictionary``: bilingual dictionaries as word pairs (MUSE: ``src<TAB>tgt`` or ``src tgt``; FreeDict
  with ``header: true``), English in ``source_column``.
"""

from __future__ import annotations

import contextlib
import gzip
import logging
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path
from typing import Any

from xdistill.data.eval_formats import check_rows_aligned, read_stsb_multi_mt
from xdistill.data.languages import known_codes
from xdistill.errors import InputFileError, XdistillError
from xdistill.io import atomic_path

log = logging.getLogger(__name__)

Triple = tuple[str, str, str]  # (lang, english, translation)

MAX_QUOTES_PER_FILE = 3
_MANY_COLUMNS = 10_000
_QUOTE_CHARS = 80
_SOURCE_HEADER_WORDS = {"en", "eng", "english", "src", "source", "sentence", "sentence1", "testset"}
_LONGEST_HEADER_WORD = 16
_TARGET_HEADER_WORDS = {"tgt", "trg", "target", "translation", "translations", "sentence2", "en", "eng"}


@dataclass
class RowChecker:
    """Row accounting for one input file: malformed rows (``bad``, bounded by ``max_bad_share``) and rows the
    format leaves out by design (``skipped``: a TED2020 row without that language's translation, a dictionary
    entry over ``max_words``, an excluded test set), so the data report accounts for every row read."""

    path: str  # as shown in the report (relative to data/raw)
    max_bad_share: float
    full_path: Path | None = None  # as named in an error
    rows: int = 0
    bad: int = 0
    reasons: Counter = field(default_factory=Counter)
    quotes: list[str] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)  # reason -> rows (or cells) left out by design

    def reject(self, line_no: int, reason: str, raw: bytes | str) -> None:
        """Count a malformed row (and quote it if it is one of the first few)."""
        self.bad += 1
        self.reasons[reason] += 1
        if len(self.quotes) < MAX_QUOTES_PER_FILE:
            text = raw.decode("utf-8", "backslashreplace") if isinstance(raw, bytes) else raw
            self.quotes.append(f"{self.path}:{line_no}: {reason}: {text[:_QUOTE_CHARS]!r}")

    def skip(self, reason: str) -> None:
        """Count a row (or one language's cell of it) the format leaves out: not malformed, not an error."""
        self.skipped[reason] += 1

    def finish(self) -> None:
        """Fail if too large a share of the file was bad."""
        if self.rows and self.bad > self.max_bad_share * self.rows:
            detail = "; ".join(f"{reason}: {n}" for reason, n in self.reasons.most_common())
            first = self.quotes[0][len(self.path) + 1 :] if self.quotes else ""
            raise InputFileError(
                self.full_path or self.path,
                f"{self.bad} of {self.rows} rows malformed ({detail}), more than the allowed "
                f"{self.max_bad_share:.1%} (parallel.max_bad_share); first at line {first}",
            )

    def summary(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "bad": self.bad,
            "reasons": dict(self.reasons),
            "quotes": list(self.quotes),
            "skipped": dict(self.skipped),
        }


class Checkers:
    """Creates one :class:`RowChecker` per file and keeps them all for the report."""

    def __init__(self, max_bad_share: float, display_root: Path | None = None) -> None:
        self.max_bad_share = max_bad_share
        self.display_root = display_root
        self.by_file: dict[str, RowChecker] = {}

    def for_file(self, path: Path) -> RowChecker:
        shown = str(path)
        if self.display_root is not None:
            try:
                shown = str(path.relative_to(self.display_root))
            except ValueError:
                pass
        checker = self.by_file.setdefault(shown, RowChecker(shown, self.max_bad_share, full_path=path))
        return checker


def _open_binary(path: Path):
    if not path.is_file():
        raise InputFileError(path, "parallel-data source file not found")
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


_BLOCK = 1 << 20


def iter_lines(path: Path, checker: RowChecker) -> Iterator[tuple[int, str]]:
    """Yield ``(line_no, text)`` of well-formed lines (no newline); reject NUL, CR LF, bad UTF-8.

    Reads 1 MiB blocks and decodes a clean block (no NUL, no CR, valid UTF-8: the usual case) in one
    go; only a block with a problem is taken apart line by line. Calls ``checker.finish()`` at the
    end, so a file with too many bad rows fails once it has been read.
    """
    line_no = 0
    try:
        with _open_binary(path) as handle:
            pending = b""
            while block := handle.read(_BLOCK):
                block = pending + block
                cut = block.rfind(b"\n") + 1
                pending, block = block[cut:], block[:cut]
                lines = _decode_block(block) if block else []
                if lines is None:  # something wrong in this block: line by line
                    for raw in block[:-1].split(b"\n"):
                        line_no += 1
                        text = _check_line(raw, line_no, checker)
                        if text is not None:
                            yield line_no, text
                    continue
                for text in lines:
                    line_no += 1
                    yield line_no, text
            if pending:  # last line without a newline
                line_no += 1
                text = _check_line(pending, line_no, checker)
                if text is not None:
                    yield line_no, text
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise InputFileError(path, f"truncated or corrupt gzip after {line_no} lines: {exc}", line_no or None) from exc
    finally:
        checker.rows += line_no
    if line_no == 0:  # a configured source that holds nothing is a mistake, not a corpus
        raise InputFileError(path, "empty file: a configured parallel-data source holds no line")
    checker.finish()


def _decode_block(block: bytes) -> list[str] | None:
    """The lines of a block that ends with a newline, or None if any line needs a closer look."""
    if b"\x00" in block or b"\r" in block:
        return None
    try:
        text = block.decode("utf-8")
    except UnicodeDecodeError:
        return None
    lines = text.split("\n")  # not splitlines(): only \n ends a line, as in the files' format
    lines.pop()  # the block ends with a newline
    return lines


def _check_line(raw: bytes, line_no: int, checker: RowChecker) -> str | None:
    if b"\x00" in raw:
        checker.reject(line_no, "NUL byte", raw)
        return None
    if raw.endswith(b"\r"):
        checker.reject(line_no, "CR LF line end", raw)
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        checker.reject(line_no, "invalid UTF-8", raw)
        return None


def _is_header(cells: list[str], expected: tuple[str, ...] | None, languages: Iterable[str] = ()) -> bool:
    """True for a header row: equal to ``expected``, or (no header known) an English-side column name
    followed only by target-side names or language codes (``en<TAB>de``, ``src<TAB>tgt``)."""
    lowered = [c.strip().lower() for c in cells]
    if expected is not None:
        return lowered == [e.strip().lower() for e in expected]
    if len(lowered) < 2 or lowered[0] not in _SOURCE_HEADER_WORDS:
        return False
    targets = _TARGET_HEADER_WORDS | known_codes() | {lang.lower() for lang in languages}
    return all(c in targets and c != lowered[0] for c in lowered[1:])


def iter_rows(
    path: Path,
    checker: RowChecker,
    columns: int | tuple[int, int],
    header: tuple[str, ...] | None | bool = None,
    languages: Iterable[str] = (),
) -> Iterator[tuple[int, list[str]]]:
    """Yield ``(line_no, cells)`` of TSV rows with the right column count (exact, or a (min, max) range).

    ``header``: a tuple = the first line must be exactly this header; ``True`` = the first line is a
    header of any content; ``None``/``False`` = no header. A row that repeats the header (or, in a
    headerless file, consists only of header words / language codes) is rejected as a stray header.
    """
    low, high = (columns, columns) if isinstance(columns, int) else columns
    first_header: tuple[str, ...] | None = None
    languages = list(languages)
    for line_no, text in iter_lines(path, checker):
        cells = text.split("\t")
        if line_no == 1 and header:
            if isinstance(header, tuple) and not _is_header(cells, header):
                raise InputFileError(path, f"expected header {'<TAB>'.join(header)!r}, found {text[:80]!r}", 1)
            first_header = tuple(cells)
            continue
        if not low <= len(cells) <= high:
            want = str(low) if low == high else f"at least {low}" if high >= _MANY_COLUMNS else f"{low}-{high}"
            checker.reject(line_no, f"{len(cells)} columns, expected {want}", text)
            continue
        # cheap pre-test on the first cell before the full header comparison
        first = cells[0]
        if (
            len(first) <= _LONGEST_HEADER_WORD
            and (first == first_header[0] if first_header else first.strip().lower() in _SOURCE_HEADER_WORDS)
            and _is_header(cells, first_header, languages)
        ):
            checker.reject(line_no, "stray header row", text)
            continue
        yield line_no, cells


# --------------------------------------------------------------------------- readers


def read_ted2020(path: Path, languages: Iterable[str], checkers: Checkers) -> Iterator[Triple]:
    """TED2020 sentence-transformers TSV: header of language codes; yield every (en, xx) with both cells."""
    checker = checkers.for_file(path)
    wanted = list(languages)
    header = _read_header(path, checker)
    if "en" not in header:
        raise InputFileError(path, f"TED2020 header has no 'en' column: {header[:10]}", 1)
    source_col = header.index("en")
    targets = [(lang, header.index(lang)) for lang in wanted if lang in header]
    if missing := [lang for lang in wanted if lang not in header]:
        log.info("%s: no column for %s (TED2020 has no such translation)", path, ", ".join(missing))
    if not targets:
        return
    for _, cells in iter_rows(path, checker, len(header), header=tuple(header)):
        english = cells[source_col]
        if not english:
            checker.skip("empty English cell")
            continue
        for lang, col in targets:
            if cells[col]:
                yield lang, english, cells[col]
            else:
                checker.skip(f"no {lang} translation")


def _read_header(path: Path, checker: RowChecker) -> list[str]:
    header_checker = RowChecker(checker.path, 1.0)  # counts what is wrong with line 1 instead of failing
    for line_no, text in iter_lines(path, header_checker):
        if line_no == 1:
            return [c.strip() for c in text.split("\t")]
        break
    if header_checker.bad:  # e.g. a CR LF file: every line rejected, so nothing is read at all
        raise InputFileError(
            path,
            f"unreadable header row ({next(iter(header_checker.reasons))}); expected language codes separated by tabs",
            1,
        )
    raise InputFileError(path, "empty file (expected a header row of language codes)")


def extract_ted2020(
    path: Path, languages: Iterable[str], dev_units: int, out_dir: Path, checkers: Checkers
) -> dict[str, tuple[int, int]]:
    """Extract every (en, xx) pair of a TED2020 TSV into ``TED2020-en-{xx}-{train,dev}.tsv.gz`` files.

    The first ``dev_units`` units that have a translation into ``xx`` are its dev set (a fixed,
    reproducible split, as in the sentence-transformers extraction script); the rest is train.
    Streams (two open gzip writers per language); files are ``english<TAB>translation`` per line and
    are written atomically. Returns ``{lang: (train_pairs, dev_pairs)}``.
    """
    wanted = list(languages)
    out_dir.mkdir(parents=True, exist_ok=True)
    counts = {lang: [0, 0] for lang in wanted}
    with contextlib.ExitStack() as stack:
        writers = {}
        for lang in wanted:
            for split in ("train", "dev"):
                tmp = stack.enter_context(atomic_path(out_dir / f"TED2020-en-{lang}-{split}.tsv.gz"))
                writers[lang, split] = stack.enter_context(gzip.open(tmp, "wt", encoding="utf-8"))
        for lang, english, translation in read_ted2020(path, wanted, checkers):
            split = "dev" if counts[lang][1] < dev_units else "train"
            writers[lang, split].write(f"{english}\t{translation}\n")
            counts[lang][0 if split == "train" else 1] += 1
    return {lang: (n_train, n_dev) for lang, (n_train, n_dev) in counts.items()}


def read_st_parallel(path: Path, lang: str | None, columns: list[str] | None, checkers: Checkers) -> Iterator[Triple]:
    """Generic sentence-transformers parallel TSV: column 1 English, columns 2..n translations."""
    checker = checkers.for_file(path)
    if columns:
        shape: int | tuple[int, int] = 1 + len(columns)
        languages = columns
    elif lang:
        shape = (2, _MANY_COLUMNS)
        languages = [lang]
    else:
        raise XdistillError(
            f"{path}: st_parallel needs 'columns' (languages of columns 2..n) or a {{lang}} file pattern"
        )
    for _, cells in iter_rows(path, checker, shape, languages=languages):
        english = cells[0]
        if not english:
            checker.skip("empty English cell")
            continue
        for position, translation in enumerate(cells[1:]):
            target = columns[position] if columns else languages[0]
            if translation:
                yield target, english, translation
            else:
                checker.skip(f"no {target} translation")


def read_moses(english_path: Path, foreign_path: Path, lang: str, checkers: Checkers) -> Iterator[Triple]:
    """Line-aligned file pair; a line bad on either side drops the pair; unequal lengths fail."""
    en_checker, xx_checker = checkers.for_file(english_path), checkers.for_file(foreign_path)
    pairs = zip_longest(_all_lines(english_path, en_checker), _all_lines(foreign_path, xx_checker))
    for english_line, foreign_line in pairs:
        if english_line is None or foreign_line is None:
            shorter = english_path if english_line is None else foreign_path
            raise InputFileError(
                shorter, f"has fewer lines than its line-aligned partner ({english_path.name} / {foreign_path.name})"
            )
        if english_line[1] is not None and foreign_line[1] is not None:
            yield lang, english_line[1], foreign_line[1]


def _all_lines(path: Path, checker: RowChecker) -> Iterator[tuple[int, str | None]]:
    """Every line position, with None for a rejected line (keeps the two sides aligned)."""
    # The checker is per file and a file can be read more than once (Multi30k's train.en.gz is
    # the English side of both en-de and en-fr): count only this pass's rows.
    rows_before = checker.rows
    expected = 1
    for line_no, text in iter_lines(path, checker):
        while expected < line_no:
            yield expected, None
            expected += 1
        yield line_no, text
        expected = line_no + 1
    while expected <= checker.rows - rows_before:
        yield expected, None
        expected += 1


def read_opus_sample(path: Path, english_side: str, lang: str, checkers: Checkers) -> Iterator[Triple]:
    """OPUS alignment listing: ``(src)="2.1"> text`` lines grouped into units separated by ``<hr>``."""
    checker = checkers.for_file(path)
    sides: dict[str, list[str]] = {"src": [], "trg": []}

    def flush() -> Iterator[Triple]:
        english = " ".join(sides[english_side])
        foreign = " ".join(sides["trg" if english_side == "src" else "src"])
        sides["src"].clear()
        sides["trg"].clear()
        if english and foreign:
            yield lang, english, foreign
        elif english or foreign:  # a 1:0 or 0:1 alignment: OPUS lists sentences without a counterpart
            checker.skip("one-sided unit")

    for line_no, text in iter_lines(path, checker):
        stripped = text.strip()
        if stripped == "<hr>":
            yield from flush()
        elif stripped.startswith(("(src)=", "(trg)=")):
            marker, sep, sentence = stripped.partition("> ")
            if not sep:
                checker.reject(line_no, "alignment line without '> '", text)
                continue
            sides[marker[1:4]].append(sentence.strip())
        elif stripped and not stripped.startswith("#"):
            checker.reject(line_no, "not an OPUS alignment line", text)
    yield from flush()


def read_stsb_translations(english_path: Path, foreign_path: Path, lang: str) -> Iterator[Triple]:
    """Both sentences of every row of a stsb-multi-mt split, paired with the English file's row.

    Both files go through the evaluation's own reader, which fails on a malformed row naming the file
    and line, so no :class:`RowChecker` counts and skips rows here.
    """
    english = read_stsb_multi_mt(english_path)
    translated = read_stsb_multi_mt(foreign_path)
    check_rows_aligned(english, translated, foreign_path)
    for en_row, xx_row in zip(english, translated):
        yield lang, en_row.sentence1, xx_row.sentence1
        yield lang, en_row.sentence2, xx_row.sentence2


def read_tatoeba(path: Path, lang: str, checkers: Checkers) -> Iterator[Triple]:
    """Tatoeba Challenge TSV: header ``en, xx, xxx_label``; columns en, xx, label."""
    for _, cells in iter_rows(path, checkers.for_file(path), (2, 3), header=True):
        yield lang, cells[0], cells[1]


def read_wmt(path: Path, lang: str, exclude_testsets: Iterable[str], checkers: Checkers) -> Iterator[Triple]:
    """WMT newstest TSV: header ``testset, en, xx``; rows of an excluded test set are skipped (and counted)."""
    excluded = tuple(exclude_testsets)
    checker = checkers.for_file(path)
    for _, cells in iter_rows(path, checker, 3, header=("testset", "en", lang)):
        if excluded and cells[0].startswith(excluded):
            checker.skip(f"excluded test set {cells[0]}")
            continue
        yield lang, cells[1], cells[2]


def read_dictionary(
    path: Path, lang: str, source_column: int, header: bool, max_words: int | None, checkers: Checkers
) -> Iterator[Triple]:
    """Bilingual dictionary as word pairs; tab-separated, or one space between the two words (MUSE)."""
    checker = checkers.for_file(path)
    for line_no, text in iter_lines(path, checker):
        if line_no == 1 and header:
            continue
        cells = text.split("\t") if "\t" in text else text.split(" ")
        if len(cells) != 2:
            checker.reject(line_no, f"{len(cells)} columns, expected 2", text)
            continue
        if _is_header(cells, None, [lang]):
            checker.reject(line_no, "stray header row", text)
            continue
        english, foreign = cells[source_column], cells[1 - source_column]
        if max_words is not None and max(len(english.split()), len(foreign.split())) > max_words:
            checker.skip(f"over {max_words} word(s)")
            continue
        yield lang, english, foreign


FormatReader = Callable[..., Iterator[Triple]]
