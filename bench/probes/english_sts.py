"""Which model is better at English STS: the teacher or the untrained student?

The quality targets ask for a student at the teacher's English level (STS17 en-en >= teacher - 1). Checkpoints
and the WiSE-FT weight are chosen on the stsb-multi-mt dev split, so whether the teacher beats the
base on *that* data decides whether the selection can reward moving towards the teacher. This probe
scores each model on every pair of the English STS sets: the stsb-multi-mt dev split (what the
trainer validates on; it validates 200 evenly spaced pairs of it), its test split (the evaluation
reads all of them in the embedded default, 300 in the quality run), and STS17 en-en (250 pairs), with
the same readers and Spearman the evaluate stage uses.

Usage: ``python -m bench.probes.english_sts RAW_DIR OUT.json NAME=MODEL [NAME=MODEL ...]`` (RAW_DIR a
corpora stage's ``data/raw``; MODEL a spec such as ``pypi:all-mpnet-base-v2`` or a model folder).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from xdistill.evaluation.sts import STSSet, build_stsb_sets, load_sts17, score_sts_set
from xdistill.io import write_json_atomic
from xdistill.models.resolve import load_sentence_transformer


def english_sets(raw_dir: Path) -> dict[str, STSSet]:
    """The English STS sets by name: stsb dev and test (all pairs) and STS17 en-en."""
    stsb = raw_dir / "eval" / "stsb-multi-mt"
    sets = {
        f"stsb-multi-mt {split} en-en": build_stsb_sets(stsb, [], None, split=split)[0][0] for split in ("dev", "test")
    }
    sets["STS17 en-en"] = next(s for s in load_sts17(raw_dir / "eval" / "sts17") if s.name == "en-en")
    return sets


def main(raw_dir: str, out: str, *models: str) -> None:
    sets = english_sets(Path(raw_dir))
    result = {
        "what": "Spearman x 100 of cosine on every pair of the English STS sets",
        "command": "python -m bench.probes.english_sts " + " ".join([raw_dir, out, *models]),
        "pairs": {name: len(s.gold) for name, s in sets.items()},
        "models": {},
    }
    for entry in models:
        name, _, spec = entry.partition("=")
        model = load_sentence_transformer(spec)
        started = time.perf_counter()

        def embed(texts, model=model):
            return model.encode(list(texts), batch_size=64, normalize_embeddings=True)

        scores = {set_name: round(score_sts_set(embed, sts), 2) for set_name, sts in sets.items()}
        result["models"][name] = {"model": spec, **scores}
        print(f"{name}: {scores} ({time.perf_counter() - started:.0f} s)", flush=True)
    write_json_atomic(out, result)


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
