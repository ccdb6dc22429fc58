"""The parallel-data TSV the ``parallel`` stage writes and training, the teacher store and evaluation read.

``data/parallel/{train,dev}.tsv.gz``: gzipped UTF-8, a header row ``source<TAB>translation<TAB>lang<TAB>corpus``
(:data:`HEADER`), then one pair per row: the English sentence, its translation, the translation's
ISO 639-1 code and the source corpus. No quoting; cleaning guarantees no tab or newline inside a cell.
This module is the one place that writes (:func:`write_parallel_tsv`) and reads
(:func:`read_parallel_pairs`) it.
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from xdistill.data.sampling import evenly_spaced
from xdistill.errors import InputFileError
from xdistill.io import atomic_path

HEADER = ("source", "translation", "lang", "corpus")


@dataclass
class ParallelPairs:
    """English sources, their translations, and each pair's language."""

    sources: list[str]
    translations: list[str]
    langs: list[str]

    def __len__(self) -> int:
        return len(self.sources)

    def spread(self, n: int | None) -> ParallelPairs:
        """``n`` pairs evenly spaced through the file (all when ``n`` is None).

        Files are often grouped by language, so the first ``n`` would miss languages.
        """
        if n is None or n >= len(self):
            return self
        rows = evenly_spaced(len(self), n)
        return ParallelPairs(
            [self.sources[i] for i in rows], [self.translations[i] for i in rows], [self.langs[i] for i in rows]
        )


def write_parallel_tsv(path: str | Path, rows: Iterable[Sequence[str]]) -> None:
    """Write the header and ``rows`` (source, translation, lang, corpus) gzipped and atomically.

    mtime 0 and no file name in the gzip header, so equal content gives equal bytes (DVC then sees
    an unchanged output and downstream stages stay cached).
    """
    with atomic_path(path) as tmp, open(tmp, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as zipped:
            with io.TextIOWrapper(zipped, encoding="utf-8", newline="\n") as handle:
                handle.write("\t".join(HEADER) + "\n")
                for row in rows:
                    handle.write("\t".join(row) + "\n")


def _open_text(path: Path):
    return (gzip.open if path.suffix == ".gz" else open)(path, "rt", encoding="utf-8", newline="")


def has_pairs(path: str | Path) -> bool:
    """Whether the file holds a row after its header (the parallel stage writes a header-only file when
    nothing was held out, e.g. no dev mining block; :func:`read_parallel_pairs` refuses such a file)."""
    path = Path(path)
    try:
        with _open_text(path) as handle:
            return next(handle, None) is not None and next(handle, None) is not None
    except (OSError, EOFError, UnicodeDecodeError) as exc:  # BadGzipFile is an OSError
        raise InputFileError(path, f"unreadable parallel data: {exc}") from exc


def read_parallel_pairs(path: str | Path) -> ParallelPairs:
    """Read a (gzipped) parallel TSV with the :data:`HEADER` row; every pair needs a source and a translation."""
    path = Path(path)
    if not path.is_file():
        raise InputFileError(path, "parallel data file not found (run the `parallel` stage first)")
    sources: list[str] = []
    translations: list[str] = []
    langs: list[str] = []
    try:
        with _open_text(path) as handle:
            # split by hand, not with csv: no cell holds a tab or a line break (normalize_text), and csv's
            # per-cell limit (131,072 characters; raising it is process-wide) would refuse a long line the
            # parallel stage wrote with cleaning.max_chars: null
            rows = (line.rstrip("\r\n").split("\t") for line in handle)
            header = next(rows, None)
            if header is None or tuple(header) != HEADER:
                raise InputFileError(path, f"expected a header {'<TAB>'.join(HEADER)!r}, found {header}", 1)
            for line_no, row in enumerate(rows, start=2):
                if len(row) != len(HEADER) or not row[0].strip() or not row[1].strip():
                    raise InputFileError(
                        path,
                        f"expected a non-empty source and translation ({len(HEADER)} columns), got {row!r}",
                        line_no,
                    )
                sources.append(row[0])
                translations.append(row[1])
                langs.append(row[2])
    except (OSError, EOFError, UnicodeDecodeError, gzip.BadGzipFile) as exc:
        raise InputFileError(path, f"unreadable parallel data: {exc}") from exc
    if not sources:
        raise InputFileError(path, "no sentence pairs")
    return ParallelPairs(sources, translations, langs)
