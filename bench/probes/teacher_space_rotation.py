"""Can a rotation put an exported student back into the teacher's space without changing anything else?

A WiSE-FT student (a < 1) sits between the untrained student's space and the teacher's, so a
teacher-built English index finds fewer of its translations (quality target 3). Every score the
promotion gate compares with the untrained student (STS, retrieval, mining, language bias) is a cosine between
two of the student's own embeddings, and an orthogonal map R leaves every such cosine as it is. The
student ends in ``Dense -> Normalize``, so ``normalize(R (W p + b)) = R normalize(W p + b)``: R folds
into the Dense head exactly. This probe fits R (orthogonal Procrustes) on training pairs, student
embeddings of both sides against the teacher's vectors of the sources (read from the teacher store),
and measures teacher-space retrieval (student(translation) <-> teacher(English)) on the member's
held-out dev pairs before and after; FLORES devtest is reported beside them, as the evaluate stage
does, and decides nothing.

Usage: ``python -m bench.probes.teacher_space_rotation WORKSPACE OUT.json [N_PAIRS]``, where WORKSPACE
holds a finished member's ``models/student`` and ``data/parallel/{train,dev}.tsv.gz`` (restored from
the DVC cache by the experiment's dvc.lock); the teacher vectors come from the shared teacher store.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from bench.paths import mirror_dir
from xdistill.data.eval_formats import read_flores
from xdistill.data.parallel_tsv import read_parallel_pairs
from xdistill.evaluation.dev import dev_pairs_by_language
from xdistill.evaluation.tatoeba import tatoeba_scores
from xdistill.mining.flores import flores_file
from xdistill.models.resolve import load_sentence_transformer
from xdistill.teacher.embed import shared_store_dir
from xdistill.teacher.store import TeacherStore
from xdistill.training.alignment import procrustes_map

TEACHER = "pypi:all-mpnet-base-v2"
LANGUAGES = ["ar", "de", "es", "fr", "it", "nl", "ru", "tr", "zh"]


def encode(model, texts: list[str]) -> np.ndarray:
    return model.encode(
        texts, batch_size=128, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False
    )


def retrieval(student_xx: np.ndarray, teacher_en: np.ndarray) -> dict[str, float]:
    return tatoeba_scores(student_xx, teacher_en)


def summarise(per_language: dict[str, dict[str, float]]) -> dict[str, float]:
    return {
        "average": float(np.mean([s["average"] for s in per_language.values()])),
        "min": float(min(min(s["xx2en"], s["en2xx"]) for s in per_language.values())),
    }


TRAIN_TSV = "data/parallel/train.tsv.gz"  # a member workspace's training pairs


def parallel_sample(train_tsv: Path, n_pairs: int) -> tuple[list[str], list[str], np.ndarray]:
    """``n_pairs`` pairs evenly spread through a parallel TSV (a member's :data:`TRAIN_TSV`): sources,
    translations and the teacher's vectors of the sources (from the shared teacher store)."""
    train = read_parallel_pairs(train_tsv)
    rows = np.linspace(0, len(train.sources) - 1, num=min(n_pairs, len(train.sources))).round().astype(int)
    sources = [train.sources[i] for i in rows]
    store = TeacherStore.open(shared_store_dir(), teacher_spec=TEACHER)
    return sources, [train.translations[i] for i in rows], store.lookup(sources)


def main(workspace: Path, out: Path, n_pairs: int) -> None:
    started = time.time()
    student = load_sentence_transformer(str(workspace / "models/student"))
    teacher = load_sentence_transformer(TEACHER)
    sources, translations, teacher_vectors = parallel_sample(workspace / TRAIN_TSV, n_pairs)
    print(f"fitting on {len(sources)} training pairs (both sides)", flush=True)
    fit_student = encode(student, sources + translations)
    fit_teacher = np.concatenate([teacher_vectors] * 2).astype(np.float64)
    rotation = procrustes_map(torch.from_numpy(fit_student.astype(np.float64)), torch.from_numpy(fit_teacher)).numpy()

    def measure(pairs: dict[str, tuple[list[str], list[str]]]) -> dict[str, dict[str, float]]:
        results: dict[str, dict[str, float]] = {}
        for lang, (english, xx) in pairs.items():
            en_teacher, xx_student = encode(teacher, english), encode(student, xx)
            results[lang] = {
                "as_exported": retrieval(xx_student, en_teacher),
                "rotated": retrieval(xx_student @ rotation, en_teacher),
            }
            print(lang, {k: round(v["average"], 1) for k, v in results[lang].items()}, flush=True)
        return results

    dev = dev_pairs_by_language(workspace / "data/parallel/dev.tsv.gz", LANGUAGES, 200)
    dev_results = measure(dev)
    flores_dir = mirror_dir() / "eval/flores200-devtest"
    english = read_flores(flores_file(flores_dir, "en"))
    flores = {lang: (english, read_flores(flores_file(flores_dir, lang))) for lang in LANGUAGES}
    flores_results = measure(flores)
    report = {
        "what": "teacher-space retrieval (student(translation) <-> teacher(English)) of an exported student, "
        "as exported and after an orthogonal rotation fitted on training pairs (every cosine between "
        "two student embeddings unchanged)",
        "command": f"python -m bench.probes.teacher_space_rotation {workspace} {out} {n_pairs}",
        "teacher": TEACHER,
        "fit_pairs": len(sources),
        "fit_mse_x100": {
            "as_exported": float(100 * np.mean((fit_student - fit_teacher) ** 2)),
            "rotated": float(100 * np.mean((fit_student @ rotation - fit_teacher) ** 2)),
        },
        "dev": {
            variant: summarise({lang: r[variant] for lang, r in dev_results.items()})
            for variant in ("as_exported", "rotated")
        },
        "flores": {
            variant: summarise({lang: r[variant] for lang, r in flores_results.items()})
            for variant in ("as_exported", "rotated")
        },
        "per_language": {"dev": dev_results, "flores": flores_results},
        "seconds": round(time.time() - started),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: report[k] for k in ("fit_mse_x100", "dev", "flores", "seconds")}, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 8000)
