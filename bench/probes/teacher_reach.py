"""How close does distillation bring the student's English embeddings to the teacher's?

The quality targets ask for a student with the teacher's English quality (STS17 en-en >= teacher - 1). This
probe measures the distance that has to be covered, on English training sources (the teacher's
vectors from the shared teacher store):

- ``as_is``: the model's own embeddings against the teacher's (MSE x 100, as the trainer's dev
  MSE; only for a model of the teacher's dimension, i.e. a student with its head);
- ``linear_probe``: a least-squares map with a bias from the model's embeddings to the teacher's,
  fitted on five sixths of the sentences and scored on the other sixth (MSE x 100 of the
  re-normalised prediction, and its mean cosine with the teacher's vector).

The untrained student's linear probe is the bar: a student whose own embeddings are further from the
teacher than a linear map of the untrained student has not learnt anything of the teacher a head could not.

Usage: ``python -m bench.probes.teacher_reach TRAIN_TSV OUT.json NAME=MODEL [NAME=MODEL ...]`` (TRAIN_TSV a
parallel stage's ``train.tsv.gz`` whose sources are in the teacher store; MODEL a spec or folder).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from bench.probes.teacher_space_rotation import TEACHER, parallel_sample
from xdistill.models.resolve import default_prompt, load_sentence_transformer

SENTENCES = 6000
HELD_OUT_EVERY = 6  # every 6th sentence scores the linear probe, the others fit it


def mse_x100(predicted: np.ndarray, target: np.ndarray) -> float:
    return float(((predicted - target) ** 2).mean() * 100)


def linear_probe(embeddings: np.ndarray, teacher: np.ndarray) -> dict[str, float]:
    """Held-out fit of ``teacher ~ embeddings @ W + b`` (least squares), predictions re-normalised."""
    held_out = np.arange(len(embeddings)) % HELD_OUT_EVERY == 0
    with_bias = np.hstack([embeddings, np.ones((len(embeddings), 1))])
    weights, *_ = np.linalg.lstsq(with_bias[~held_out], teacher[~held_out], rcond=None)
    predicted = with_bias[held_out] @ weights
    predicted /= np.linalg.norm(predicted, axis=1, keepdims=True)
    return {
        "mse_x100": mse_x100(predicted, teacher[held_out]),
        "mean_cosine": float((predicted * teacher[held_out]).sum(axis=1).mean()),
    }


def measure(spec: str, texts: list[str], teacher: np.ndarray) -> dict[str, object]:
    model = load_sentence_transformer(spec)
    embeddings = model.encode(
        texts, batch_size=128, normalize_embeddings=True, prompt=default_prompt(model), show_progress_bar=False
    ).astype(np.float64)
    as_is = mse_x100(embeddings, teacher) if embeddings.shape[1] == teacher.shape[1] else None
    return {
        "model": spec,
        "dimension": int(embeddings.shape[1]),
        "as_is_mse_x100": as_is,
        "linear_probe": linear_probe(embeddings, teacher),
    }


def main(train_tsv: Path, out: Path, models: list[str]) -> None:
    started = time.time()
    texts, _, teacher = parallel_sample(train_tsv, SENTENCES)
    teacher = teacher.astype(np.float64)
    results = {}
    for item in models:
        name, _, spec = item.partition("=")
        results[name] = measure(spec, texts, teacher)
        print(name, json.dumps(results[name]), flush=True)
    report = {
        "what": "distance of each model's English embeddings from the teacher's: as they are, and through a "
        "least-squares linear map fitted on held-in sentences (held-out MSE x 100, mean cosine)",
        "command": "python -m bench.probes.teacher_reach " + " ".join([str(train_tsv), str(out), *models]),
        "teacher": TEACHER,
        "sentences": len(texts),
        "held_out": int((np.arange(len(texts)) % HELD_OUT_EVERY == 0).sum()),
        "models": results,
        "seconds": round(time.time() - started, 1),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:])
