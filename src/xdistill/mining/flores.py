"""A BUCC-style bitext-mining benchmark built from FLORES-200 devtest.

The official BUCC data is not redistributable here, so this builds a small benchmark with the
same file layout (see :mod:`xdistill.mining.bucc`) from the 1012 multi-way parallel FLORES-200
devtest sentences. Construction, for a seed and a gold share ``g`` (default 0.05):

1. One seeded permutation of the 1012 sentence numbers (the same for every language, so all
   languages share one English side and are comparable) is cut into two halves: ``train``
   (506 sentences, for threshold tuning) and ``test`` (506).
2. In each half, ``n_gold`` sentence numbers become gold pairs: their xx version goes to the xx
   side and their English version to the English side. ``n_gold`` is chosen so gold pairs are
   a share ``g`` of each side: ``n_gold = round(g * half / (2 - g))``.
3. The other numbers of the half are split into two disjoint, equal groups: the first group's
   xx versions fill the xx side, the second group's English versions fill the English side.
   Their translations are absent, so they have no parallel partner (FLORES sentences come in
   runs from the same article, so fillers are often on-topic distractors).
4. Each side is shuffled (seeded) and numbered ``{lang}-{split}-{position:06d}``; positions
   therefore say nothing about gold alignment.

With the defaults each side has 259 sentences, 13 of them (5.0 %) gold, per split.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from xdistill.data.eval_formats import (
    FLORES_SENTENCES,
    bucc_paths,
    read_flores,
    write_bucc_gold,
    write_id_sentences,
)
from xdistill.errors import XdistillError
from xdistill.io import atomic_path, write_json_atomic
from xdistill.mining.bucc import MANIFEST_FILE, TEST_SPLIT, TUNE_SPLIT

logger = logging.getLogger(__name__)

# recorded in MANIFEST.json (kept out of __doc__ so it survives python -OO)
CONSTRUCTION = (
    "seeded permutation of the 1012 devtest sentence numbers (shared by all languages) cut into train/test "
    "halves; in each half n_gold = round(gold_share * 506 / (2 - gold_share)) numbers are gold pairs, the rest "
    "split into disjoint xx-only and en-only filler groups (no translation on the other side); each side "
    "shuffled and numbered {lang}-{split}-{position:06d}"
)

ENGLISH = "eng_Latn"

# ISO 639-1 (and a few common tags) -> FLORES-200 file stem
FLORES_CODES: dict[str, str] = {
    "am": "amh_Ethi",
    "ar": "arb_Arab",
    "bg": "bul_Cyrl",
    "bn": "ben_Beng",
    "cs": "ces_Latn",
    "de": "deu_Latn",
    "el": "ell_Grek",
    "en": "eng_Latn",
    "es": "spa_Latn",
    "fa": "pes_Arab",
    "fi": "fin_Latn",
    "fr": "fra_Latn",
    "he": "heb_Hebr",
    "hi": "hin_Deva",
    "hu": "hun_Latn",
    "hy": "hye_Armn",
    "id": "ind_Latn",
    "it": "ita_Latn",
    "ja": "jpn_Jpan",
    "ka": "kat_Geor",
    "kk": "kaz_Cyrl",
    "ko": "kor_Hang",
    "mk": "mkd_Cyrl",
    "mn": "khk_Cyrl",
    "mr": "mar_Deva",
    "nl": "nld_Latn",
    "pl": "pol_Latn",
    "pt": "por_Latn",
    "ro": "ron_Latn",
    "ru": "rus_Cyrl",
    "sw": "swh_Latn",
    "th": "tha_Thai",
    "tl": "tgl_Latn",
    "tr": "tur_Latn",
    "tt": "tat_Cyrl",
    "uk": "ukr_Cyrl",
    "ur": "urd_Arab",
    "vi": "vie_Latn",
    "zh": "zho_Hans",
    "zh-cn": "zho_Hans",
    "zh-tw": "zho_Hant",
}


def flores_file(flores_dir: str | Path, language: str) -> Path:
    """The devtest file of a language given as ISO 639-1 code or as a FLORES code (deu_Latn)."""
    stem = FLORES_CODES.get(language.lower(), language)
    return Path(flores_dir) / f"{stem}.devtest"


def split_plan(seed: int, gold_share: float) -> dict[str, dict[str, np.ndarray]]:
    """Sentence numbers for each split: gold, xx-only fillers and en-only fillers."""
    if not 0 < gold_share <= 1:
        raise XdistillError(f"gold_share must be in (0, 1], got {gold_share}")
    rng = np.random.default_rng(seed)
    permutation = rng.permutation(FLORES_SENTENCES)
    half = FLORES_SENTENCES // 2
    plan = {}
    for split, numbers in ((TUNE_SPLIT, permutation[:half]), (TEST_SPLIT, permutation[half : 2 * half])):
        n_gold = max(1, round(gold_share * len(numbers) / (2 - gold_share)))
        fillers = numbers[n_gold:]
        n_fill = len(fillers) // 2
        plan[split] = {"gold": numbers[:n_gold], "xx_only": fillers[:n_fill], "en_only": fillers[n_fill : 2 * n_fill]}
    return plan


def write_split(
    out_dir: Path,
    language: str,
    split: str,
    numbers: dict[str, np.ndarray],
    xx_sentences: list[str],
    en_sentences: list[str],
    seed: int,
) -> dict[str, int]:
    """Write one language and split in the BUCC layout; returns the side sizes."""
    rng = np.random.default_rng([seed, 1 if split == TEST_SPLIT else 0])
    xx_numbers = rng.permutation(np.concatenate([numbers["gold"], numbers["xx_only"]]))
    en_numbers = rng.permutation(np.concatenate([numbers["gold"], numbers["en_only"]]))
    xx_ids = [f"{language}-{split}-{position:06d}" for position in range(len(xx_numbers))]
    en_ids = [f"en-{split}-{position:06d}" for position in range(len(en_numbers))]
    xx_id_of = dict(zip(xx_numbers.tolist(), xx_ids))
    en_id_of = dict(zip(en_numbers.tolist(), en_ids))
    paths = bucc_paths(out_dir, language, split)
    write_id_sentences(paths["xx"], xx_ids, [xx_sentences[n] for n in xx_numbers])
    write_id_sentences(paths["en"], en_ids, [en_sentences[n] for n in en_numbers])
    n_gold = write_bucc_gold(paths["gold"], ((xx_id_of[n], en_id_of[n]) for n in numbers["gold"].tolist()))
    return {"n_xx": len(xx_ids), "n_en": len(en_ids), "n_gold": n_gold}


def build_flores_bucc(
    flores_dir: str | Path,
    out_dir: str | Path,
    languages: Sequence[str],
    *,
    seed: int = 13,
    gold_share: float = 0.05,
) -> dict[str, Any]:
    """Build the FLORES-200 BUCC-style benchmark for ``languages`` (vs English) in ``out_dir``.

    Languages whose devtest file is missing are skipped with a reason. Writes
    ``out_dir/MANIFEST.json`` (settings, sizes, skipped languages) and returns the same dict.
    The output is deterministic for given inputs, seed and gold share. ``out_dir`` is replaced
    as a whole, atomically.
    """
    flores_dir = Path(flores_dir)
    english_path = flores_file(flores_dir, ENGLISH)
    if not english_path.is_file():
        raise XdistillError(f"{english_path}: FLORES-200 English devtest file not found")
    english = read_flores(english_path)
    plan = split_plan(seed, gold_share)
    manifest: dict[str, Any] = {
        "source": "FLORES-200 devtest",
        "seed": seed,
        "gold_share": gold_share,
        "languages": {},
        "skipped": {},
        "construction": CONSTRUCTION,
    }
    with atomic_path(out_dir, is_dir=True) as tmp:
        for language in languages:
            if language.lower() == "en" or flores_file(flores_dir, language) == english_path:
                manifest["skipped"][language] = "English is the pivot side of every pair"
                continue
            path = flores_file(flores_dir, language)
            if not path.is_file():
                manifest["skipped"][language] = f"no FLORES-200 devtest file {path.name} in {flores_dir}"
                logger.warning("FLORES mining benchmark: skipping %s (%s)", language, manifest["skipped"][language])
                continue
            sentences = read_flores(path)
            manifest["languages"][language] = {
                "flores_file": path.name,
                **{
                    split: write_split(tmp, language, split, plan[split], sentences, english, seed)
                    for split in (TUNE_SPLIT, TEST_SPLIT)
                },
            }
        write_json_atomic(tmp / MANIFEST_FILE, manifest)
    return manifest
