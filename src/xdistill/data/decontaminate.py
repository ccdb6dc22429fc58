"""The sentences of every evaluation set, keyed loosely (case, punctuation): none may be trained on.

Read from the staged ``data/raw/eval`` tree (whatever the ``corpora`` stage put there):
STS17 (both sentences of every track), STS Benchmark and stsb-multi-mt (all splits staged; the
train split only while ``parallel.decontaminate_train_splits`` is on),
the LASER Tatoeba test set (both sides, every language), FLORES-200 devtest (which the BUCC-style
mining benchmark is built from), and BUCC files (``{xx}-en.{split}.{lang}``, ``id<TAB>sentence``)
when a user stages them under ``eval/bucc*``. The files are read by the same readers the
benchmarks use (:mod:`xdistill.data.eval_formats`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from xdistill.data.eval_formats import evaluation_files
from xdistill.data.normalize import decontamination_key

log = logging.getLogger(__name__)


def evaluation_sentences(raw_dir: str | Path, train_splits: bool = True) -> set[str]:
    """The :func:`~xdistill.data.normalize.decontamination_key` of every sentence of every evaluation set
    staged in ``raw_dir`` (a training side is contaminated when its key is among them).

    ``train_splits=False``: without the STS Benchmark's train split (see :func:`evaluation_files`).
    """
    sentences: set[str] = set()
    files = evaluation_files(raw_dir, train_splits)
    for path, read_sentences in files:
        sentences.update(decontamination_key(s) for s in read_sentences(path))
    sentences.discard("")
    log.info("decontamination: %d distinct evaluation sentences from %d files", len(sentences), len(files))
    return sentences
