"""``parallel.sources`` entries -> streams of ``(lang, english, translation)`` triples.

A source names a dataset file pattern relative to ``data/raw`` (``{lang}``, ``{lang3}``,
``{flores}`` placeholders), its format (see :mod:`xdistill.data.formats`), its sampling weight,
and optionally the languages it covers. Without ``languages`` a source covers every configured
language for which its file exists (WMT has no Arabic: skipped, noted in the log); with an explicit
list, a missing file is an error.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xdistill.config import SECTION_CONFIG, Count, NonNegativeFloat, parse_section
from xdistill.data import formats
from xdistill.data.languages import expand
from xdistill.errors import InputFileError, XdistillError

log = logging.getLogger(__name__)

FORMATS = ("ted2020", "st_parallel", "opus_sample", "moses", "tatoeba", "wmt", "dictionary", "stsb_multi_mt")


@dataclass
class SourceSpec:
    """One configured parallel-data source."""

    name: str
    format: str
    files: str
    weight: NonNegativeFloat = 1.0
    languages: list[str] | None = None
    dev: bool = True  # may contribute held-out dev pairs (off for word lists)
    # may supply the dev mining blocks: its last parallel.dev_mining_block cleaned pairs of each
    # language, in file order (whole news documents: on-topic distractors, as FLORES's article runs)
    dev_mining: bool = False
    source_files: str | None = None  # moses, stsb_multi_mt: the English side's pattern
    english_side: str = "trg"  # opus_sample: which side is English
    columns: list[str] | None = None  # st_parallel: languages of columns 2..n
    exclude_testsets: list[str] = field(default_factory=list)  # wmt
    source_column: int = 0  # dictionary: column holding the English word
    header: bool = False  # dictionary: first line is a header (FreeDict)
    max_words: Count | None = None  # dictionary: drop entries longer than this many words

    __pydantic_config__ = SECTION_CONFIG

    @classmethod
    def from_params(cls, entry: dict[str, Any]) -> SourceSpec:
        name = entry.get("name", "?") if isinstance(entry, dict) else "?"
        return parse_section(cls, entry, f"parallel.sources[{name}]")

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise XdistillError(
                f"parallel.sources[{self.name}]: unknown format '{self.format}' (one of {', '.join(FORMATS)})"
            )
        if self.english_side not in ("src", "trg"):
            raise XdistillError(
                f"parallel.sources[{self.name}]: english_side must be 'src' or 'trg', not {self.english_side!r}"
            )
        if self.source_column not in (0, 1):
            raise XdistillError(
                f"parallel.sources[{self.name}]: source_column must be 0 or 1 (a two-column "
                f"word list), not {self.source_column!r}"
            )

    def covered_languages(self, languages: Iterable[str]) -> list[str]:
        wanted = list(languages)
        return [lang for lang in wanted if lang in self.languages] if self.languages is not None else wanted


def source_files(spec: SourceSpec, raw_dir: Path, languages: Iterable[str]) -> dict[str, Path]:
    """Per language, the file this source reads (per-language formats), skipping uncovered ones."""
    found = {}
    for lang in spec.covered_languages(languages):
        path = raw_dir / expand(spec.files, lang)
        if path.is_file():
            found[lang] = path
        elif spec.languages is not None:
            raise InputFileError(
                path, f"source '{spec.name}' lists language '{lang}' but its file is missing from data/raw"
            )
        else:
            log.info("source %s: no %s file for %s, skipped", spec.name, path.name, lang)
    return found


def read_source(
    spec: SourceSpec, raw_dir: Path, languages: Iterable[str], checkers: formats.Checkers
) -> Iterator[formats.Triple]:
    """Stream the triples of one source for the configured languages."""
    languages = spec.covered_languages(languages)
    if spec.format in ("ted2020", "st_parallel") and "{" not in spec.files:
        path = raw_dir / spec.files
        if spec.format == "ted2020":
            yield from formats.read_ted2020(path, languages, checkers)
        else:
            columns = spec.columns
            for lang, english, translation in formats.read_st_parallel(path, None, columns, checkers):
                if lang in languages:
                    yield lang, english, translation
        return
    for lang, path in source_files(spec, raw_dir, languages).items():
        yield from _read_language_file(spec, raw_dir, lang, path, checkers)


def _read_language_file(
    spec: SourceSpec, raw_dir: Path, lang: str, path: Path, checkers: formats.Checkers
) -> Iterator[formats.Triple]:
    if spec.format == "tatoeba":
        return formats.read_tatoeba(path, lang, checkers)
    if spec.format == "wmt":
        return formats.read_wmt(path, lang, spec.exclude_testsets, checkers)
    if spec.format == "dictionary":
        return formats.read_dictionary(path, lang, spec.source_column, spec.header, spec.max_words, checkers)
    if spec.format == "opus_sample":
        return formats.read_opus_sample(path, spec.english_side, lang, checkers)
    if spec.format == "moses":
        return formats.read_moses(_english_file(spec, raw_dir, lang), path, lang, checkers)
    if spec.format == "stsb_multi_mt":
        return formats.read_stsb_translations(_english_file(spec, raw_dir, lang), path, lang)
    if spec.format == "ted2020":
        return formats.read_ted2020(path, [lang], checkers)
    return formats.read_st_parallel(path, lang, spec.columns, checkers)


def _english_file(spec: SourceSpec, raw_dir: Path, lang: str) -> Path:
    """The English partner of a two-file format: ``source_files``, else ``files`` with ``{lang}`` = en."""
    return raw_dir / (expand(spec.source_files, lang) if spec.source_files else expand(spec.files, "en"))
