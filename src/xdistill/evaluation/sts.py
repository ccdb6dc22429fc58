"""STS benchmarks: SemEval-2017 (STS17) official tracks and STS Benchmark built cross-lingually.

Every set is scored the same way: cosine similarity of the two sentence embeddings of a pair,
then Spearman x 100 against the gold scores over the set (:func:`score_sts_set`).

- **STS17** (SemEval-2017 Task 1): the seven official tracks, read from the official input and
  gold files. Track 6 (tr-en) has 500 input lines for 250 gold scores: the scores belong to the
  first 250 lines (see :data:`TR_EN_ALIGNMENT`). Track 4b (es-en, WMT news MT output) is kept
  out of the headline average (see :data:`TRACK_4B_NOTE`).
- **STSb multi-MT** (stsb-multi-mt test split, machine-translated STS Benchmark): monolingual
  ``xx-xx`` sets, and cross-lingual sets built as the STS2017-extended data was: the English
  sentence 1 with the translated sentence 2 (``en-xx``) and the reverse (``xx-en``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from xdistill.data.eval_formats import check_rows_aligned, read_sts_gold, read_sts_input, read_stsb_multi_mt
from xdistill.data.sampling import evenly_spaced
from xdistill.errors import InputFileError, XdistillError
from xdistill.evaluation.metrics import paired_cosine, spearman_x100

if TYPE_CHECKING:
    from xdistill.evaluation.encoding import CachedEncoder

# key -> official track file stem. Track 2 (ar-en) and 4a (es-en) have the non-English
# sentence in either column: cosine is symmetric, so the column order does not matter.
STS17_TRACKS: dict[str, str] = {
    "ar-ar": "track1.ar-ar",
    "ar-en": "track2.ar-en",
    "es-es": "track3.es-es",
    "es-en-4a": "track4a.es-en",
    "es-en-4b": "track4b.es-en",
    "en-en": "track5.en-en",
    "tr-en": "track6.tr-en",
}
STS17_INPUT_DIR = "STS2017.eval.v1.1"
STS17_GOLD_DIR = "STS2017.gs"
# Tracks outside the headline STS17 average.
STS17_OUTSIDE_AVERAGE = ("es-en-4b",)


def is_monolingual_track(track: str) -> bool:
    """``ar-ar`` -> True, ``es-en-4a`` -> False: both sides of the track's pairs share a language."""
    source, target = track.split("-")[:2]
    return source == target


TR_EN_ALIGNMENT = (
    "STS17 track 6 (tr-en) has 500 input lines but 250 gold scores and the official files do not say which "
    "lines are scored. The gold scores belong to the first 250 input lines: two multilingual encoders "
    "correlate at 55-73 Spearman x100 with them against 7-13 for the last 250 lines and about 0 for the odd "
    "or even lines (measured on the corpora mirror, see its README). The track is scored on lines 1-250."
)
TRACK_4B_NOTE = (
    "STS17 track 4b (es-en, WMT news machine-translation output) scores near zero for every encoder tried: "
    "its pairs are MT outputs of one source judged for adequacy, which surface-similarity embeddings do not "
    "rank. It is reported on its own line, outside the STS17 average (the average covers the other six "
    "tracks, as most papers' STS17 tables do)."
)

STSB_SPLIT_FILE = "data/stsb-{lang}-{split}.csv"


@dataclass(frozen=True)
class STSSet:
    """One STS evaluation set: aligned sentence pairs with gold similarity scores (0-5)."""

    name: str
    sentences1: list[str]
    sentences2: list[str]
    gold: np.ndarray
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not (len(self.sentences1) == len(self.sentences2) == len(self.gold)):
            raise XdistillError(f"STS set {self.name}: sentence and score counts differ")

    def __len__(self) -> int:
        return len(self.gold)

    def subset(self, max_pairs: int | None) -> STSSet:
        """At most ``max_pairs`` pairs, evenly spaced over the set (sets are ordered by genre)."""
        if max_pairs is None or max_pairs >= len(self):
            return self
        keep = evenly_spaced(len(self), max_pairs)
        return STSSet(
            self.name,
            [self.sentences1[i] for i in keep],
            [self.sentences2[i] for i in keep],
            self.gold[keep],
            [*self.notes, f"{max_pairs} of {len(self)} pairs, evenly spaced"],
        )


def score_sts_set(embed: Callable[[Sequence[str]], np.ndarray], sts_set: STSSet) -> float:
    """Spearman x 100 of the pairs' cosine similarities against the gold scores."""
    first = embed(sts_set.sentences1)
    second = embed(sts_set.sentences2)
    return spearman_x100(paired_cosine(first, second), sts_set.gold)


def sts_predictions(model: CachedEncoder, sts_set: STSSet) -> np.ndarray:
    """The cosine similarity of each pair of ``sts_set`` under ``model``."""
    return paired_cosine(model.encode(sts_set.sentences1), model.encode(sts_set.sentences2))


def score_sts_sets(model: CachedEncoder, sets: list[STSSet]) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Spearman x 100 of every set (``{name: score}``) and the predictions behind them (``{name: cosines}``)."""
    predictions = {s.name: sts_predictions(model, s) for s in sets}
    return {s.name: spearman_x100(predictions[s.name], s.gold) for s in sets}, predictions


# ---------------------------------------------------------------- STS17


def scored_line_count(track: str, n_inputs: int, n_gold: int, input_path: Path, gold_path: Path) -> int:
    """How many leading input lines the gold scores cover (all of them, except track 6)."""
    if n_inputs == n_gold:
        return n_inputs
    if track == "tr-en" and n_inputs == 2 * n_gold:
        return n_gold  # TR_EN_ALIGNMENT: the scored pairs are the first half
    # either file may be the short one: name both
    raise InputFileError(
        input_path, f"{n_inputs} input pairs but {n_gold} gold scores in {gold_path}, and no known alignment"
    )


def read_sts17_track(sts17_dir: str | Path, track: str) -> STSSet:
    """One official STS17 track (``track`` a key of :data:`STS17_TRACKS`) with its gold scores."""
    if track not in STS17_TRACKS:
        raise XdistillError(f"unknown STS17 track {track!r}; known: {', '.join(STS17_TRACKS)}")
    stem = STS17_TRACKS[track]
    input_path = Path(sts17_dir) / STS17_INPUT_DIR / f"STS.input.{stem}.txt"
    gold_path = Path(sts17_dir) / STS17_GOLD_DIR / f"STS.gs.{stem}.txt"
    pairs = read_sts_input(input_path)
    gold = read_sts_gold(gold_path)
    scored = scored_line_count(track, len(pairs), len(gold), input_path, gold_path)
    kept = [(pair, score) for pair, score in zip(pairs[:scored], gold) if score is not None]
    if len(kept) < 2:  # here, where the file is known: Spearman would refuse the set without naming it
        raise InputFileError(
            gold_path, f"{len(kept)} scored pair(s) for {input_path.name}; a Spearman correlation needs at least two"
        )
    notes = [TR_EN_ALIGNMENT] if scored != len(pairs) else []
    if track in STS17_OUTSIDE_AVERAGE:
        notes.append(TRACK_4B_NOTE)
    return STSSet(
        name=track,
        sentences1=[pair[0] for pair, _ in kept],
        sentences2=[pair[1] for pair, _ in kept],
        gold=np.array([score for _, score in kept], dtype=np.float64),
        notes=notes,
    )


def load_sts17(sts17_dir: str | Path, max_pairs: int | None = None) -> list[STSSet]:
    """All seven official STS17 tracks (optionally capped, evenly spaced)."""
    return [read_sts17_track(sts17_dir, track).subset(max_pairs) for track in STS17_TRACKS]


# ---------------------------------------------------------------- STSb multi-MT


def stsb_languages(stsb_dir: str | Path, languages: Sequence[str], split: str = "test") -> list[str]:
    """The non-English ``languages`` that have a stsb-multi-mt file of ``split`` (test, dev, train)."""
    return [
        lang
        for lang in languages
        if lang != "en" and (Path(stsb_dir) / STSB_SPLIT_FILE.format(lang=lang, split=split)).is_file()
    ]


def build_stsb_sets(
    stsb_dir: str | Path, languages: Sequence[str], max_pairs: int | None = None, split: str = "test"
) -> tuple[list[STSSet], list[STSSet]]:
    """Monolingual (``en-en``, ``xx-xx``) and cross-lingual (``en-xx``, ``xx-en``) STSb sets of ``split``.

    The evaluation reads the ``test`` split; training selects checkpoints on the ``dev`` split.

    Rows of every language file are translations of the same English rows (checked through the
    gold scores, which must agree row by row). Languages without a file are left out.
    """
    english_path = Path(stsb_dir) / STSB_SPLIT_FILE.format(lang="en", split=split)
    english = read_stsb_multi_mt(english_path)
    gold = np.array([row.score for row in english])
    monolingual = [STSSet("en-en", [r.sentence1 for r in english], [r.sentence2 for r in english], gold)]
    crosslingual = []
    for lang in stsb_languages(stsb_dir, languages, split):
        path = Path(stsb_dir) / STSB_SPLIT_FILE.format(lang=lang, split=split)
        translated = read_stsb_multi_mt(path)
        check_rows_aligned(english, translated, path)
        monolingual.append(
            STSSet(f"{lang}-{lang}", [r.sentence1 for r in translated], [r.sentence2 for r in translated], gold)
        )
        crosslingual.append(
            STSSet(f"en-{lang}", [r.sentence1 for r in english], [r.sentence2 for r in translated], gold)
        )
        crosslingual.append(
            STSSet(f"{lang}-en", [r.sentence1 for r in translated], [r.sentence2 for r in english], gold)
        )
    return [s.subset(max_pairs) for s in monolingual], [s.subset(max_pairs) for s in crosslingual]
