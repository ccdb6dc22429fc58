"""Inference: the exported student's encoding throughput, and what a 128-d (LEALLA-style) index saves.

Two rows, each side by side in one process:

1. encoding a text file with the exported student: ours = ``xdistill encode``'s path
   (``encode_file``: streamed lines, sharded, atomic ``.npy``) vs the plain library way
   (read the lines, ``SentenceTransformer.encode``, ``np.save``); same model, sentences, batch
   size and threads, repeats alternating. Target: our streaming and atomic writes cost <= 5 %.
2. a cross-lingual search index of ``--index-rows`` sentences: 128-d vectors (a LEALLA-style
   student) vs the student's 384-d ones: serialised faiss index size and exact k-NN search time
   of ``--queries`` queries (k=4), medians of repeats. The 128-d vectors are the principal-axes
   projection of the student's embeddings (how a 128-d student's head starts, see
   ``train.student.align_to_teacher``), or a trained 128-d student's (``--student-128d``).

    python -m bench.perf.inference                          # models/student, 2000 sentences, 1e5 index
    python -m bench.perf.inference --student-128d PATH      # a trained 128-d student for row 2
    python -m bench.perf.inference --tiny                   # seconds; prints, does not overwrite results
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from bench.paths import REPO_ROOT
from bench.perf.common import Row, alternate, peak_rss_mb, real_sentences, report_rows, throughput_row, time_repeats

ENCODE_TARGET = 0.95
LOW_DIM = 128


def encode_row(student: str, sentences: list[str], batch_size: int, repeats: int) -> Row:
    """Row 1: ``encode_file`` vs read + ``SentenceTransformer.encode`` + ``np.save``."""
    import torch

    from xdistill.mining.stream import encode_file
    from xdistill.models import load_encoder

    encoder = load_encoder(student, device="cpu")
    encoder.encode(sentences[:32], batch_size=batch_size)  # warm-up
    with tempfile.TemporaryDirectory(prefix="bench-inference-") as tmp:
        text = Path(tmp) / "sentences.txt"
        text.write_text("\n".join(sentences) + "\n", encoding="utf-8")

        def ours() -> None:
            encode_file(encoder, text, Path(tmp) / "ours.npy", batch_size=batch_size, progress=False)

        def reference() -> None:
            lines = text.read_text(encoding="utf-8").splitlines()
            vectors = encoder.model.encode(
                lines, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True
            )
            np.save(Path(tmp) / "reference.npy", vectors)

        timings = alternate(ours, reference, repeats)
        same = np.allclose(np.load(Path(tmp) / "ours.npy"), np.load(Path(tmp) / "reference.npy"), atol=1e-5)
    details = {
        "student": student,
        "sentences": len(sentences),
        "batch_size": batch_size,
        "threads": torch.get_num_threads(),
        "dimension": encoder.dimension,
        "same_vectors": bool(same),
    }
    return throughput_row(
        f"encode a text file with the exported student ({student}, {encoder.dimension}-d): "
        "`xdistill encode` vs SentenceTransformer.encode + np.save",
        len(sentences),
        *timings,
        details,
        target=ENCODE_TARGET,
    )


def low_dim_vectors(vectors: np.ndarray, student_128d: str | None, sentences: list[str], batch_size: int) -> np.ndarray:
    """128-d vectors of the same sentences: a trained 128-d student's, else the principal-axes projection."""
    if student_128d:
        from xdistill.models import load_encoder

        return load_encoder(student_128d, device="cpu").encode(sentences, batch_size=batch_size)
    centred = vectors - vectors.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    reduced = vectors @ vt[:LOW_DIM].T
    return (reduced / np.linalg.norm(reduced, axis=1, keepdims=True)).astype(np.float32)


def tile_rows(vectors: np.ndarray, rows: int, seed: int = 0) -> np.ndarray:
    """``rows`` unit vectors: the real ones repeated with small noise (an index as large as asked)."""
    rng = np.random.default_rng(seed)
    picked = vectors[rng.integers(0, len(vectors), size=rows)]
    noisy = picked + rng.normal(scale=0.02, size=picked.shape).astype(np.float32)
    return (noisy / np.linalg.norm(noisy, axis=1, keepdims=True)).astype(np.float32)


def index_row(full: np.ndarray, low: np.ndarray, rows: int, queries: int, repeats: int) -> Row:
    """Row 2: faiss flat inner-product index, 128-d vs the student's dimension."""
    import faiss

    measured = {}
    for name, vectors in (("low", low), ("full", full)):
        base = tile_rows(vectors, rows)
        index = faiss.IndexFlatIP(base.shape[1])
        index.add(base)
        query = base[:queries]
        timing = time_repeats(lambda index=index, query=query: index.search(query, 4), repeats=repeats, warmup=1)
        measured[name] = {
            "dimension": int(base.shape[1]),
            "index_mb": faiss.serialize_index(index).nbytes / 2**20,
            "search": timing,
        }
    low_m, full_m = measured["low"], measured["full"]
    size_ratio = full_m["index_mb"] / low_m["index_mb"]
    speed_ratio = full_m["search"].median / low_m["search"].median
    return Row(
        benchmark=(
            f"search index of {rows:.0e} sentences, exact k-NN of {queries:.0e} queries (k=4): "
            f"{low_m['dimension']}-d (LEALLA-style) vs {full_m['dimension']}-d student"
        ),
        ours=f"{low_m['index_mb']:.1f} MB, {low_m['search'].fmt()}",
        reference=f"{full_m['index_mb']:.1f} MB, {full_m['search'].fmt()}",
        ratio=f"{size_ratio:.2f}x smaller, {speed_ratio:.2f}x faster",
        target="none (size and speed of a 128-d index)",
        passed=None,
        details={
            name: {"dimension": m["dimension"], "index_mb": m["index_mb"], "search_s": m["search"].samples}
            for name, m in measured.items()
        },
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--student",
        default=str(REPO_ROOT / "models" / "student"),
        help="exported student folder or model spec (default: models/student from dvc repro)",
    )
    parser.add_argument("--student-128d", default=None, help="a trained 128-d student for the index row")
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--index-rows", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--tiny", action="store_true", help="a few sentences, small index; results printed, not saved")
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    if args.tiny:
        args.sentences, args.repeats, args.index_rows, args.queries = 160, 1, 2000, 200
    if not args.student.startswith("pypi:") and not Path(args.student).exists():
        sys.exit(f"error: {args.student}: no exported student; run `dvc repro` first or pass --student SPEC")

    import xdistill  # noqa: F401  (offline environment)
    from xdistill.models import load_encoder

    sentences = real_sentences(args.sentences)
    rows = [encode_row(args.student, sentences, args.batch_size, args.repeats)]
    full = load_encoder(args.student, device="cpu").encode(sentences, batch_size=args.batch_size)
    low = low_dim_vectors(full, args.student_128d, sentences, args.batch_size)
    rows.append(index_row(full, low, args.index_rows, args.queries, args.repeats))
    rows[-1].details["vectors_128d"] = args.student_128d or "principal-axes projection of the student's vectors"
    rows[-1].details["peak_rss_mb"] = round(peak_rss_mb())
    report_rows("inference", rows, args.tiny, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
