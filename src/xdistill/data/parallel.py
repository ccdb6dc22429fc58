"""The ``parallel`` stage: every configured source -> cleaned, decontaminated train/dev TSVs + report.

Three streaming passes over temporary spool files (one per source x language), so memory stays
flat whatever the input size:

1. read each source (:mod:`xdistill.data.sources`), run the cleaning chain
   (:mod:`xdistill.data.clean`) and spool the survivors; a seeded reservoir per language keeps
   ``dev_pairs_per_language`` held-out pairs from the sources marked ``dev: true``, and a tail
   buffer per (source, language) keeps the last ``dev_mining_block`` pairs of sources marked ``dev_mining: true``
   (the dev mining blocks: whole documents in file order);
2. count what is left per spool once the dev pairs and blocks, and every pair sharing a sentence
   with one of them (``dev_overlap``), are removed;
3. draw each source's share of ``max_train_pairs`` (weights, small sources repeated up to
   ``max_repeats``), split evenly over its languages, and write the streams interleaved in random order.

Outputs (written atomically): ``train.tsv.gz``, ``dev.tsv.gz`` and ``dev_mining.tsv.gz`` (the blocks,
in file order; empty when no source sets ``dev_mining_block``) in the parallel TSV format of
:mod:`xdistill.data.parallel_tsv` (English, its translation, ISO 639-1, source name), and the data
report (:mod:`xdistill.data.report`).
"""

from __future__ import annotations

import logging
import random
import tempfile
from collections import Counter, deque
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from xdistill.config import SECTION_CONFIG, Count, Fraction, NonNegativeInt, PositiveFloat, parse_section
from xdistill.data import report as data_report
from xdistill.data.clean import Cleaner, CleaningConfig
from xdistill.data.decontaminate import evaluation_sentences
from xdistill.data.formats import Checkers
from xdistill.data.normalize import decontamination_key
from xdistill.data.parallel_tsv import write_parallel_tsv
from xdistill.data.sampling import Reservoir, interleave, repeat_and_select, source_targets, split_evenly
from xdistill.data.sources import SourceSpec, read_source
from xdistill.errors import XdistillError
from xdistill.io import atomic_path

log = logging.getLogger(__name__)


@dataclass
class _ParallelSettings:
    """The scalar keys of the ``parallel`` section, checked by config.parse_section."""

    __pydantic_config__ = SECTION_CONFIG

    dev_pairs_per_language: NonNegativeInt = 200
    dev_mining_block: NonNegativeInt = 0
    max_train_pairs: Count | None = None
    max_repeats: PositiveFloat = 2.0
    max_bad_share: Fraction = 0.01
    seed: int = 13
    # the STS Benchmark's train split counts as evaluation data (its sentences are never trained on)
    # unless this is off; a stsb_multi_mt source needs it off (xdistill.data.eval_formats.evaluation_files)
    decontaminate_train_splits: bool = True


@dataclass(kw_only=True)
class ParallelConfig(_ParallelSettings):
    """The ``parallel`` params section: the scalar settings plus sources and cleaning, parsed by their own classes."""

    sources: list[SourceSpec]
    cleaning: CleaningConfig

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> ParallelConfig:
        """The section checked key by key; the scalar keys one declaration, so they cannot drift apart."""
        params = dict(params)
        if not params.get("sources"):
            raise XdistillError("parallel.sources: no source configured")
        sources = [SourceSpec.from_params(entry) for entry in params.pop("sources")]
        names = [s.name for s in sources]
        if len(set(names)) != len(names):
            raise XdistillError(f"parallel.sources: duplicate names in {names}")
        cleaning = CleaningConfig.from_params(params.pop("cleaning", None))
        settings = parse_section(_ParallelSettings, params, "parallel")
        train_split_readers = [s.name for s in sources if s.format == "stsb_multi_mt"]
        if train_split_readers and settings.decontaminate_train_splits:
            raise XdistillError(
                f"parallel.sources {train_split_readers}: format stsb_multi_mt reads the STS Benchmark's train split, "
                "which decontamination removes while parallel.decontaminate_train_splits is true; set it to false"
            )
        return cls(sources=sources, cleaning=cleaning, **asdict(settings))


class _Spool:
    """Cleaned pairs of one (source, language) in a temporary plain-text file."""

    def __init__(self, folder: Path, corpus: str, lang: str) -> None:
        self.corpus, self.lang = corpus, lang
        self.path = folder / f"{corpus}.{lang}.tsv"
        self.handle = open(self.path, "w", encoding="utf-8")
        self.count = 0

    def write(self, source: str, translation: str) -> int:
        self.handle.write(f"{source}\t{translation}\n")
        self.count += 1
        return self.count - 1

    def close(self) -> None:
        self.handle.close()

    def pairs(self) -> Iterator[tuple[int, str, str]]:
        with open(self.path, encoding="utf-8") as handle:
            for index, line in enumerate(handle):
                source, translation = line.rstrip("\n").split("\t")
                yield index, source, translation


def build_parallel(
    raw_dir: str | Path,
    languages: list[str],
    params: dict[str, Any],
    train_path: str | Path = "data/parallel/train.tsv.gz",
    dev_path: str | Path = "data/parallel/dev.tsv.gz",
    dev_mining_path: str | Path = "data/parallel/dev_mining.tsv.gz",
    metrics_path: str | Path = "metrics/data_report.json",
    markdown_path: str | Path = "reports/data_report.md",
    plot_path: str | Path = "plots/data_report.png",
) -> dict[str, Any]:
    """Run the stage; returns the report dict (also written to ``metrics_path``)."""
    config = ParallelConfig.from_params(params)
    raw_dir, train_path = Path(raw_dir), Path(train_path)
    if not raw_dir.is_dir():
        raise XdistillError(f"{raw_dir}: raw corpora folder not found (run the corpora stage first)")
    rng = random.Random(config.seed)
    checkers = Checkers(config.max_bad_share, display_root=raw_dir)
    cleaner = Cleaner(config.cleaning, evaluation_sentences(raw_dir, config.decontaminate_train_splits), languages)
    train_path.parent.mkdir(parents=True, exist_ok=True)
    finals = (train_path, Path(dev_path), Path(dev_mining_path))
    with tempfile.TemporaryDirectory(prefix=".spool-", dir=train_path.parent) as folder, ExitStack() as together:
        # the three files replace the old ones together, on success only: a new train file beside an old
        # dev file could hold its pairs
        train_tmp, dev_tmp, mining_tmp = (together.enter_context(atomic_path(path)) for path in finals)
        spools, reservoirs, blocks = _clean_into_spools(
            config, raw_dir, languages, checkers, cleaner, Path(folder), rng
        )
        dev_rows = _dev_rows(reservoirs)
        block_rows = [item for key in sorted(blocks) for item in blocks[key]]
        held_rows = dev_rows + block_rows  # a pair in both counts once below
        dev_keys = {(row[3], row[2], index) for index, row in held_rows}
        dev_sentences = {decontamination_key(s) for _, row in held_rows for s in row[:2]}
        held = _held_out_rows(spools, dev_keys, dev_sentences)
        available, overlap = _count_available(spools, held, dev_keys)
        plan = _plan(config, spools, available)
        written = _write_train(train_tmp, spools, plan, available, held, rng)
        _refuse_empty_training(written, spools, held, raw_dir, languages)
        write_parallel_tsv(dev_tmp, (row for _, row in dev_rows))
        write_parallel_tsv(mining_tmp, (row for _, row in block_rows))
    report = data_report.assemble(
        languages,
        config,
        cleaner,
        checkers,
        _count_by_source(dev_rows),
        overlap,
        available,
        written,
        _count_by_source(block_rows),
    )
    data_report.write_all(report, metrics_path, markdown_path, plot_path)
    log.info(
        "parallel: %d train pairs, %d dev pairs, %d dev mining pairs",
        sum(written.values()),
        len(dev_rows),
        len(block_rows),
    )
    return report


def _refuse_empty_training(written, spools, held, raw_dir: Path, languages: list[str]) -> None:
    """A stage that wrote no training pair must fail with the reason, not hand the trainer an empty file
    (raised inside the atomic writes, so the previous outputs stay)."""
    if sum(written.values()):
        return
    cleaned = sum(spool.count for spool in spools.values())
    held_out = sum(len(rows) for rows in held.values())
    raise XdistillError(
        f"parallel: 0 training pairs for languages {', '.join(languages)} from {raw_dir}: {len(spools)} "
        f"source/language files gave {cleaned} pairs after cleaning, {held_out} of them held out as dev pairs "
        "or for sharing a sentence with one; check parallel.sources (files, languages), parallel.cleaning "
        "and parallel.dev_pairs_per_language"
    )


def _count_by_source(rows: list[tuple[int, tuple[str, str, str, str]]]) -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = {}
    for _, row in rows:
        counts[(row[3], row[2])] = counts.get((row[3], row[2]), 0) + 1
    return counts


def _clean_into_spools(
    config: ParallelConfig,
    raw_dir: Path,
    languages: list[str],
    checkers: Checkers,
    cleaner: Cleaner,
    folder: Path,
    rng: random.Random,
) -> tuple[dict[tuple[str, str], _Spool], dict[str, Reservoir], dict[tuple[str, str], list]]:
    """Clean every source into spools; returns them, the dev reservoirs and the dev mining blocks."""
    spools: dict[tuple[str, str], _Spool] = {}
    reservoirs = {lang: Reservoir(config.dev_pairs_per_language, rng) for lang in languages}
    blocks: dict[tuple[str, str], deque] = {}
    for spec in config.sources:
        triples = cleaner.run(spec.name, read_source(spec, raw_dir, languages, checkers))
        for lang, source, translation in tqdm(
            triples, desc=f"clean {spec.name}", unit=" pairs", mininterval=5, leave=False
        ):
            spool = spools.get((spec.name, lang))
            if spool is None:
                spool = spools[(spec.name, lang)] = _Spool(folder, spec.name, lang)
            item = (spool.write(source, translation), (source, translation, lang, spec.name))
            if spec.dev and config.dev_pairs_per_language > 0:
                reservoirs[lang].offer(item)
            if spec.dev_mining and config.dev_mining_block:
                # the tail buffer ends as the block (a pair may also be a dev pair: both are held out,
                # and the dev sample stays what it is without blocks)
                blocks.setdefault((spec.name, lang), deque(maxlen=config.dev_mining_block)).append(item)
    for spool in spools.values():
        spool.close()
    for (name, lang), tail in blocks.items():
        assert tail.maxlen is not None  # every block is made with maxlen=dev_mining_block
        if len(tail) < tail.maxlen:
            log.warning("dev mining: only %d pairs for %s en-%s (wanted %d)", len(tail), name, lang, tail.maxlen)
    return spools, reservoirs, {key: list(tail) for key, tail in blocks.items()}


def _dev_rows(reservoirs: dict[str, Reservoir]) -> list[tuple[int, tuple[str, str, str, str]]]:
    rows = []
    for lang, reservoir in reservoirs.items():
        if reservoir.size and len(reservoir.items) < reservoir.size:
            log.warning("dev: only %d pairs for %s (wanted %d)", len(reservoir.items), lang, reservoir.size)
        rows += sorted(reservoir.items, key=lambda item: (item[1][3], item[0]))
    return rows


def _is_held_out(key, source, translation, dev_keys, dev_sentences) -> bool:
    return (
        key in dev_keys
        or decontamination_key(source) in dev_sentences
        or decontamination_key(translation) in dev_sentences
    )


def _held_out_rows(spools, dev_keys, dev_sentences) -> dict[tuple[str, str], frozenset[int]]:
    """Per spool, the rows training must skip: the held-out pairs and every pair sharing a sentence with one
    (found in one pass; the train pass then tests row numbers only)."""
    return {
        key: frozenset(
            index for index, s, t in spool.pairs() if _is_held_out((*key, index), s, t, dev_keys, dev_sentences)
        )
        for key, spool in spools.items()
    }


def _count_available(spools, held, dev_keys) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
    """Per spool: pairs training may use, and pairs held out only for sharing a sentence with a held-out pair."""
    available, overlap = {}, {}
    dev_by_spool = Counter(k[:2] for k in dev_keys)
    for key, spool in spools.items():
        overlap[key] = len(held[key]) - dev_by_spool[key]
        available[key] = spool.count - len(held[key])
    return available, overlap


def _plan(config: ParallelConfig, spools, available) -> dict[tuple[str, str], int]:
    per_source = {spec.name: sum(n for (c, _), n in available.items() if c == spec.name) for spec in config.sources}
    weights = {spec.name: spec.weight for spec in config.sources}
    if config.max_train_pairs is None:
        # no cap: every cleaned pair of every language x its source's weight (splitting a source's total
        # evenly over its languages would repeat a small language and drop pairs of a large one)
        return {key: min(round(n * weights[key[0]]), int(n * config.max_repeats)) for key, n in available.items()}
    targets = source_targets(per_source, weights, config.max_train_pairs, config.max_repeats)
    plan = {}
    for name, target in targets.items():
        sizes = {key: n for key, n in available.items() if key[0] == name}
        plan.update(split_evenly(target, sizes, config.max_repeats))
    return plan


def _write_train(train_path, spools, plan, available, held, rng) -> dict[tuple[str, str], int]:
    def stream(key):
        skip = held[key]
        kept = ((s, t, key[1], key[0]) for index, s, t in spools[key].pairs() if index not in skip)
        return repeat_and_select(kept, available[key], plan[key], rng)

    streams = {key: (plan[key], stream(key)) for key in sorted(spools)}
    write_parallel_tsv(train_path, interleave(streams, rng))
    return {key: plan[key] for key in spools}
