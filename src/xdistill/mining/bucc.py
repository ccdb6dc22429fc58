"""BUCC 2017/2018 bitext-mining evaluation: file reader, threshold tuning, precision/recall/F1.

Layout (one folder, ``xx`` a language code)::

    {xx}-en.{split}.{xx}    id<TAB>sentence   (non-English side)
    {xx}-en.{split}.en      id<TAB>sentence   (English side)
    {xx}-en.{split}.gold    xx_id<TAB>en_id   (the parallel pairs)

Splits: the FLORES-built benchmark (:mod:`xdistill.mining.flores`) writes ``train`` and ``test``;
the official BUCC 2017/2018 release ships ``sample`` and ``training`` with gold (its ``test`` gold
is not public), so there the threshold is tuned on ``sample`` and ``training`` is scored, as
XTREME does.

Protocol (LASER): mine candidates xx->en with margin scoring, choose the score threshold that
maximises F1 on the tuning split, apply it to the scored split and report precision, recall, F1.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from xdistill.data.eval_formats import bucc_paths, read_bucc_gold, read_id_sentences
from xdistill.errors import InputFileError, XdistillError
from xdistill.mining.margin import MARGINS, RETRIEVALS, MinedPairs, check_choice, mine_embeddings

if TYPE_CHECKING:
    from xdistill.models.encoders import Encoder

logger = logging.getLogger(__name__)

TUNE_SPLIT = "train"
TEST_SPLIT = "test"
# (tuning split, scored split) of each layout, tried in order: the FLORES-built one, the official release
SPLIT_LAYOUTS = ((TUNE_SPLIT, TEST_SPLIT), ("sample", "training"))
# the problem of a file that holds nothing, by side: it would score F1 0 without a word
EMPTY_FILE = {"xx": "no sentences", "en": "no sentences", "gold": "no gold pairs"}
# written by a benchmark builder (:mod:`xdistill.mining.flores`) next to the files, with why it left languages out
MANIFEST_FILE = "MANIFEST.json"


@dataclass(frozen=True)
class BuccSplit:
    """One language pair and split: sentences of both sides and the gold pairs (by id)."""

    language: str
    split: str
    xx_ids: list[str]
    xx_sentences: list[str]
    en_ids: list[str]
    en_sentences: list[str]
    gold: set[tuple[str, str]]


def read_bucc_split(folder: str | Path, language: str, split: str) -> BuccSplit:
    """Read one language and split of a BUCC-layout folder."""
    paths = bucc_paths(folder, language, split)
    xx_ids, xx_sentences = read_id_sentences(paths["xx"])
    en_ids, en_sentences = read_id_sentences(paths["en"])
    gold = read_bucc_gold(paths["gold"], xx_ids, en_ids)
    for side, found in (("xx", xx_ids), ("en", en_ids), ("gold", gold)):
        if not found:
            raise InputFileError(paths[side], EMPTY_FILE[side])
    return BuccSplit(language, split, xx_ids, xx_sentences, en_ids, en_sentences, gold)


def precision_recall_f1(predicted: Iterable[tuple[str, str]], gold: set[tuple[str, str]]) -> dict[str, float]:
    """Precision, recall and F1 of predicted pairs against gold pairs (0 when undefined)."""
    predicted = set(predicted)
    true_positives = len(predicted & gold)
    precision = true_positives / len(predicted) if predicted else 0.0
    recall = true_positives / len(gold) if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def tune_threshold(scores: np.ndarray, is_gold: np.ndarray, n_gold: int) -> tuple[float, float]:
    """Score threshold maximising F1 when keeping candidates with ``score >= threshold``.

    ``scores`` are candidate scores, ``is_gold`` marks the candidates that are gold pairs and
    ``n_gold`` is the number of gold pairs (some may never appear as candidates). Only cuts
    between distinct scores are considered (equal scores are kept or dropped together). The
    threshold is the midpoint between the last kept and the first dropped score, as LASER does.
    Returns ``(threshold, best_f1)``; with no candidate, no gold or no gold candidate the threshold is
    +inf (every cut scores F1 0 then: a finite one would be a guess that keeps pairs on the scored split).
    """
    scores = np.asarray(scores, np.float64)
    is_gold = np.asarray(is_gold, bool)
    if len(scores) == 0 or n_gold == 0 or not is_gold.any():
        return float("inf"), 0.0
    order = np.argsort(-scores, kind="stable")
    sorted_scores, sorted_gold = scores[order], is_gold[order]
    kept = np.arange(1, len(scores) + 1)
    true_positives = np.cumsum(sorted_gold)
    f1 = 2 * true_positives / (kept + n_gold)  # = 2PR/(P+R) with P = tp/kept, R = tp/n_gold
    # a cut after position i is valid only where the next score is strictly lower
    valid = np.append(sorted_scores[:-1] > sorted_scores[1:], True)
    f1 = np.where(valid, f1, -1.0)
    best = int(np.argmax(f1))  # first maximum: the highest threshold reaching the best F1
    if best + 1 < len(scores):
        threshold = (sorted_scores[best] + sorted_scores[best + 1]) / 2
    else:
        threshold = sorted_scores[best]
    return float(threshold), float(f1[best])


def mined_id_pairs(pairs: MinedPairs, split: BuccSplit) -> list[tuple[str, str]]:
    """Row-index pairs (source = xx, target = en) turned into BUCC id pairs."""
    return [(split.xx_ids[s], split.en_ids[t]) for s, t in zip(pairs.src.tolist(), pairs.tgt.tolist())]


def evaluate_split_pairs(tune: tuple[MinedPairs, BuccSplit], test: tuple[MinedPairs, BuccSplit]) -> dict[str, float]:
    """Tune the threshold on the tuning split's candidates, apply it to the test split's."""
    tune_pairs, tune_split = tune
    tune_ids = mined_id_pairs(tune_pairs, tune_split)
    is_gold = np.array([pair in tune_split.gold for pair in tune_ids], bool)
    threshold, tune_f1 = tune_threshold(tune_pairs.scores, is_gold, len(tune_split.gold))
    test_pairs, test_split = test
    kept = test_pairs.above(threshold)
    metrics = precision_recall_f1(mined_id_pairs(kept, test_split), test_split.gold)
    metrics.update(
        threshold=threshold,
        train_f1=tune_f1,
        n_predicted=len(kept),
        n_gold=len(test_split.gold),
        n_xx=len(test_split.xx_ids),
        n_en=len(test_split.en_ids),
    )
    return metrics


def mine_split(
    encoder: Encoder, split: BuccSplit, *, k: int, margin: str, retrieval: str, batch_size: int
) -> MinedPairs:
    """Embed both sides of a split and mine xx->en candidates (row pairs of the split).

    As LASER's BUCC script (``--unify``): each side's distinct texts are mined, and a mined text pair
    stands for every id pair sharing those texts. Mining the copies of a repeated sentence as rows of
    their own would fill each other's k-NN lists and leave all but one of them unpaired.
    """
    xx_texts, xx_rows = _distinct_texts(split.xx_sentences)
    en_texts, en_rows = _distinct_texts(split.en_sentences)
    xx = encoder.encode(xx_texts, batch_size=batch_size, show_progress_bar=False)
    en = encoder.encode(en_texts, batch_size=batch_size, show_progress_bar=False)
    mined = mine_embeddings(np.asarray(xx), np.asarray(en), k=k, margin=margin, retrieval=retrieval)
    src, tgt, scores = [], [], []
    for x, e, score in zip(mined.src.tolist(), mined.tgt.tolist(), mined.scores.tolist()):
        for row_x in xx_rows[x]:
            for row_e in en_rows[e]:
                src.append(row_x)
                tgt.append(row_e)
                scores.append(score)
    return MinedPairs(np.array(src, np.int64), np.array(tgt, np.int64), np.array(scores, np.float32))


def _distinct_texts(sentences: Sequence[str]) -> tuple[list[str], list[list[int]]]:
    """The distinct sentences in first-seen order, and for each the rows that hold it."""
    rows: dict[str, list[int]] = {}
    for row, sentence in enumerate(sentences):
        rows.setdefault(sentence, []).append(row)
    return list(rows), list(rows.values())


def evaluate_bitext_mining(
    encoder: Encoder,
    benchmark_dir: str | Path,
    languages: Sequence[str],
    *,
    k: int = 4,
    margin: str = "ratio",
    retrieval: str = "max",
    batch_size: int = 64,
) -> dict[str, Any]:
    """BUCC protocol on every language of a BUCC-layout folder (official BUCC or FLORES-built).

    Returns ``{"languages": {xx: {precision, recall, f1, threshold, train_f1, n_predicted, n_gold,
    n_xx, n_en}}, "average": {precision, recall, f1}, "skipped": {xx: reason}, "settings": {...}}``
    with precision/recall/F1 as fractions in [0, 1]. A language without both its train and test
    files is skipped with the reason (the builder's, when its manifest records one); an empty file is an error.
    """
    check_choice(margin, MARGINS, "margin")
    check_choice(retrieval, RETRIEVALS, "retrieval")
    benchmark_dir = Path(benchmark_dir)
    if not benchmark_dir.is_dir():
        raise XdistillError(f"{benchmark_dir}: bitext-mining benchmark folder not found")
    per_language: dict[str, dict[str, float]] = {}
    skipped: dict[str, str] = {}
    found = {language: split_layout(benchmark_dir, language) for language in languages}
    layouts = {layout for layout in found.values() if layout is not None}
    if len(layouts) > 1:  # before any encoding: a mixed folder is a mistake, not a long run's end
        raise XdistillError(f"{benchmark_dir}: mixes split layouts {sorted(layouts)}; one benchmark, one layout")
    for language, layout in found.items():
        if layout is not None:
            check_not_empty(benchmark_dir, language, layout)  # before any encoding too
    for language, layout in found.items():
        if layout is None:
            skipped[language] = skip_reason(benchmark_dir, language)
            logger.warning("bitext mining: skipping %s (%s)", language, skipped[language])
            continue
        runs = []
        for split_name in layout:
            split = read_bucc_split(benchmark_dir, language, split_name)
            runs.append(
                (mine_split(encoder, split, k=k, margin=margin, retrieval=retrieval, batch_size=batch_size), split)
            )
        per_language[language] = evaluate_split_pairs(runs[0], runs[1])
        logger.info(
            "bitext mining %s-en: F1 %.3f (P %.3f R %.3f)",
            language,
            per_language[language]["f1"],
            per_language[language]["precision"],
            per_language[language]["recall"],
        )
    average = {
        name: float(np.mean([m[name] for m in per_language.values()])) if per_language else float("nan")
        for name in ("precision", "recall", "f1")
    }
    tune, test = layouts.pop() if layouts else SPLIT_LAYOUTS[0]
    return {
        "languages": per_language,
        "average": average,
        "skipped": skipped,
        "settings": {"k": k, "margin": margin, "retrieval": retrieval, "tune_split": tune, "test_split": test},
    }


def skip_reason(folder: Path, language: str) -> str:
    """Why ``language`` has no split layout in ``folder``: the builder's reason when its manifest records one
    (no FLORES file, ...: the real one), else the files that are not there."""
    built = builder_skip_reasons(folder).get(language)
    if built:
        return built
    missing = [
        str(p) for split in SPLIT_LAYOUTS[0] for p in bucc_paths(folder, language, split).values() if not p.is_file()
    ]
    return (
        f"missing file(s): {', '.join(missing)} (or the official release's "
        f"{language}-en.sample.* and {language}-en.training.*)"
    )


def builder_skip_reasons(folder: Path) -> dict[str, str]:
    """``{language: reason}`` a benchmark builder recorded in the folder's manifest; {} without one.

    A file of that name that is not such a manifest (official BUCC as a user staged it) is not the
    builder's: the missing files are reason enough then, so it is ignored rather than refused.
    """
    path = folder / MANIFEST_FILE
    try:
        skipped = json.loads(path.read_text("utf-8")).get("skipped")
    except (OSError, ValueError, AttributeError):  # not there; bad JSON or UTF-8; not an object
        return {}
    return {str(lang): str(reason) for lang, reason in skipped.items()} if isinstance(skipped, dict) else {}


def check_not_empty(folder: Path, language: str, layout: tuple[str, str]) -> None:
    """Refuse a 0-byte file of the layout (:func:`read_bucc_split` refuses one of blank lines, later)."""
    for split in layout:
        for side, path in bucc_paths(folder, language, split).items():
            if path.stat().st_size == 0:
                raise InputFileError(path, EMPTY_FILE[side])


def split_layout(folder: Path, language: str) -> tuple[str, str] | None:
    """The (tuning, scored) splits whose six files ``folder`` holds for ``language``; None without."""
    for layout in SPLIT_LAYOUTS:
        if all(path.is_file() for split in layout for path in bucc_paths(folder, language, split).values()):
            return layout
    return None
