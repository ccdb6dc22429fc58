"""Small real inputs for the evaluation tests: a dev file and a BUCC-layout folder from mirror data."""

from __future__ import annotations

import gzip
from pathlib import Path

from xdistill.data.parallel_tsv import write_parallel_tsv

TATOEBA_TRAIN = "train/tatoeba-challenge/tatoeba-challenge.minus-laser-test.en-{lang}.tsv.gz"


def training_pairs(mirror: Path, lang: str, count: int, skip: int = 0) -> list[tuple[str, str]]:
    """``count`` (English, translation) pairs of the mirror's Tatoeba-challenge training file."""
    pairs = []
    with gzip.open(mirror / TATOEBA_TRAIN.format(lang=lang), "rt", encoding="utf-8") as handle:
        next(handle)  # header
        for line in handle:
            english, translation = line.rstrip("\n").split("\t")[:2]
            pairs.append((english, translation))
            if len(pairs) == skip + count:
                break
    return pairs[skip:]


def write_dev_file(path: Path, mirror: Path, languages: list[str], per_language: int) -> Path:
    """A ``source<TAB>translation<TAB>lang<TAB>corpus`` gzipped dev file with a header."""
    write_parallel_tsv(
        path,
        (
            (english, translation, lang, "tatoeba")
            for lang in languages
            for english, translation in training_pairs(mirror, lang, per_language)
        ),
    )
    return path


def write_bucc_folder(folder: Path, mirror: Path, lang: str, gold: int = 4, fillers: int = 6) -> Path:
    """A tiny BUCC-layout folder (train and test splits): ``gold`` parallel pairs hidden among
    ``fillers`` sentences per side that have no partner on the other side."""
    folder.mkdir(parents=True, exist_ok=True)
    pairs = training_pairs(mirror, lang, 2 * (gold + 2 * fillers))
    for number, split in enumerate(("train", "test")):
        chunk = pairs[number * (gold + 2 * fillers) : (number + 1) * (gold + 2 * fillers)]
        parallel, xx_only, en_only = chunk[:gold], chunk[gold : gold + fillers], chunk[gold + fillers :]
        xx_side = [(f"{lang}-{i}", t) for i, (_, t) in enumerate(parallel + xx_only)]
        en_side = [(f"en-{i}", e) for i, (e, _) in enumerate(parallel + en_only)]
        (folder / f"{lang}-en.{split}.{lang}").write_text("".join(f"{i}\t{s}\n" for i, s in reversed(xx_side)), "utf-8")
        (folder / f"{lang}-en.{split}.en").write_text("".join(f"{i}\t{s}\n" for i, s in en_side), "utf-8")
        (folder / f"{lang}-en.{split}.gold").write_text("".join(f"{lang}-{i}\ten-{i}\n" for i in range(gold)), "utf-8")
    return folder
