"""Teacher embedding throughput: ``embed_into_store`` vs ``SentenceTransformer.encode``.

Same model (the default teacher), same real sentences from the corpora mirror, same threads and
batch size, in one process, repeats alternating between the two sides. Two rows:

1. end to end, from model spec to vectors: ours = ``embed_into_store`` into a fresh store
   (model load, normalise, hash, tokenise, encode, fp16 shards written and fsynced);
   reference = ``SentenceTransformer(folder)`` + ``.encode`` (vectors left in memory).
2. encoding only, model already loaded: ours = ``encode_length_sorted`` (true token-length
   order); reference = ``.encode``.

Target: ours >= 1.0x the reference throughput.

    python -m bench.perf.teacher_embed            # 4000 sentences, 3 repeats
    python -m bench.perf.teacher_embed --tiny     # seconds; prints, does not overwrite results
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from bench.perf.common import alternate, peak_rss_mb, real_sentences, report_rows, throughput_row

TEACHER = "pypi:all-minilm-l6-v2"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=4000, help="distinct real sentences (default 4000)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's default)")
    parser.add_argument("--tiny", action="store_true", help="48 sentences, 1 repeat, results not saved")
    args = parser.parse_args(argv)
    if args.tiny:
        args.sentences, args.repeats, args.batch_size = 48, 1, 16

    import torch
    from sentence_transformers import SentenceTransformer

    import xdistill  # noqa: F401  (offline environment)
    from xdistill.models import load_sentence_transformer, resolve_model_dir
    from xdistill.teacher.embed import embed_into_store, encode_length_sorted

    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    sentences = real_sentences(args.sentences)
    folder = str(resolve_model_dir(TEACHER))
    model = load_sentence_transformer(TEACHER, device="cpu")
    model.encode(sentences[:32], batch_size=args.batch_size)  # warm-up: allocator, kernels, page cache
    details = {
        "sentences": len(sentences),
        "batch_size": args.batch_size,
        "threads": threads,
        "teacher": TEACHER,
        "device": "cpu",
    }
    print(f"{len(sentences)} sentences, batch {args.batch_size}, {threads} threads, {args.repeats} repeats")

    with tempfile.TemporaryDirectory(prefix="bench-teacher-") as tmp:
        fresh = iter(range(10**6))

        def ours_end_to_end() -> None:
            stats = embed_into_store(
                Path(tmp) / f"store-{next(fresh)}",
                TEACHER,
                sentences,
                batch_size=args.batch_size,
                device="cpu",
                progress=False,
            )
            assert stats.n_new == len(sentences)

        def reference_end_to_end() -> None:
            SentenceTransformer(folder, device="cpu", local_files_only=True).encode(
                sentences, batch_size=args.batch_size, convert_to_numpy=True
            )

        end_to_end = alternate(ours_end_to_end, reference_end_to_end, args.repeats)

    def ours_encode() -> None:
        for _ in encode_length_sorted(model, sentences, args.batch_size, progress=False):
            pass

    def reference_encode() -> None:
        model.encode(sentences, batch_size=args.batch_size, convert_to_numpy=True)

    encode_only = alternate(ours_encode, reference_encode, args.repeats)
    details["peak_rss_mb"] = round(peak_rss_mb())
    rows = [
        throughput_row(
            "teacher embedding, end to end: embed_into_store (fresh fp16 store) vs SentenceTransformer load + encode",
            len(sentences),
            *end_to_end,
            details,
        ),
        throughput_row(
            "teacher embedding, encode only (model loaded): token-length-sorted batches vs SentenceTransformer.encode",
            len(sentences),
            *encode_only,
            details,
        ),
    ]
    report_rows("teacher_embed", rows, args.tiny)
    return 0


if __name__ == "__main__":
    sys.exit(main())
