"""GPU throughput, ours vs sentence-transformers side by side, in one run on one CUDA device.

Two measurements, each in two precisions, with models of the real shapes built from transformers
configs (:mod:`bench.perf.gpu_models`: random weights, a generated WordPiece vocabulary; speed depends
on shapes and token counts, not on weight values) and synthetic sentences of realistic lengths:

- training (pairs/s): an mE5-small-shaped student (12 layers, 384 wide, 250,037-piece vocabulary, its
  word embeddings frozen, a Dense head to 768) distilled with MSE towards 768-d teacher vectors (all-mpnet-base-v2's
  dimension) in fp32 and bf16: ours, :func:`xdistill.training.trainer.train_student` (``train.device: cuda``,
  ``train.precision``), against ``SentenceTransformerTrainer`` + ``MSELoss`` (``bf16=True`` for bf16) on the
  same pairs, batch size, steps and schedule. Ours: pairs / time inside the steps; the reference: pairs /
  ``train_runtime``.
- teacher encoding (sentences/s): an all-mpnet-base-v2-shaped teacher (12 layers, 768 wide) in fp32 and fp16
  (``teacher_embed.precision``): ours, :func:`xdistill.teacher.embed.encode_length_sorted` (batches in
  descending token length), against ``SentenceTransformer.encode`` on the same model and sentences.

fp32 is exact fp32 on both sides (TF32 stays off, torch's default). Needs CUDA; ``--device cpu --tiny``
runs the same code on tiny shapes on a CPU (the smoke test; half precisions are GPU-only and skipped there).
Writes the rows as JSON (``--json``; default ``$OUT/gpu_check.json``, else ``gpu-check-out/gpu_check.json``)
in the format of ``bench/results/*.json``, and prints them with the GPU's name.
Usage: ``python -m bench.perf.gpu_check [--device cuda|cpu] [--tiny] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import tempfile
import time
import traceback
from dataclasses import asdict
from datetime import date
from pathlib import Path
from typing import Any

from bench.perf.common import Row, alternate, print_rows
from bench.perf.gpu_models import (
    ME5_SMALL,
    MPNET_BASE,
    TINY_BERT,
    TINY_MPNET,
    build_model_folder,
    synthetic_sentences,
    synthetic_words,
    write_parallel_files,
    write_random_teacher_store,
)
from bench.perf.gpu_train import STUDENT_OPTIONS, run_training, train_params

TEACHER_DIM = 768  # all-mpnet-base-v2's

# What BENCHMARKS.md says while no GPU run is recorded (bench/results/gpu_check.json).
PENDING_SECTION = """## gpu_check

Not yet run on a GPU: no figures. `make gpu-check` (on a GPU machine with torch, transformers and
sentence-transformers; the other packages travel as wheels, `scripts/gpu_check_wheels.sh`) runs
`tests/test_gpu.py` (its `gpu` tests: fp16/bf16 teacher encoding against fp32, training on cuda in fp32, bf16
and fp16, a 1-GPU DDP run under `torch.distributed.run`) and `python -m bench.perf.gpu_check`: training pairs/s of an
mE5-small-shaped student towards 768-d (mpnet) teacher vectors in fp32 and bf16, ours vs
`SentenceTransformerTrainer` + `MSELoss`, and teacher encoding sentences/s of an all-mpnet-base-v2-shaped
model in fp32 and fp16, ours (length-sorted batches) vs `SentenceTransformer.encode`. Models are built from
configs of the real shapes (random weights), sentences are synthetic. The figures go to
`gpu-check-out/gpu_check.json` (or `$OUT`); copied to `bench/results/gpu_check.json`, they become this section.

"""


def default_json_path() -> Path:
    out = os.environ.get("OUT")
    return Path(out) / "gpu_check.json" if out else Path("gpu-check-out") / "gpu_check.json"


def device_name(device: str) -> str:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


# --------------------------------------------------------------------------------------------
# Teacher encoding
# --------------------------------------------------------------------------------------------


def encoding_rows(teacher: str, sentences: list[str], args: argparse.Namespace) -> list[Row]:
    """Ours vs ``SentenceTransformer.encode`` in each precision, on one loaded teacher cast in turn."""
    from sentence_transformers import SentenceTransformer

    from xdistill.models.precision import cast_for_inference
    from xdistill.teacher.embed import encode_length_sorted

    rows = []
    for precision in args.encode_precisions:
        model = cast_for_inference(
            SentenceTransformer(teacher, device=args.device, local_files_only=True), precision, "gpu_check"
        )

        def ours(model: Any = model) -> None:
            for _ in encode_length_sorted(model, sentences, args.encode_batch_size, progress=False):
                pass
            synchronize(args.device)

        def reference(model: Any = model) -> None:
            model.encode(sentences, batch_size=args.encode_batch_size, convert_to_numpy=True)
            synchronize(args.device)

        ours(), reference()  # warm-up: kernels, cuBLAS handles, the allocator
        ours_t, reference_t = alternate(ours, reference, args.repeats)
        n = len(sentences)
        ratio = reference_t.median / ours_t.median
        rows.append(
            Row(
                benchmark=f"teacher encoding, {args.teacher_label} in {precision} ({n} sentences, batch "
                f"{args.encode_batch_size}, {args.gpu})",
                ours=f"{n / ours_t.median:.0f} sent/s ({n / ours_t.high:.0f}-{n / ours_t.low:.0f})",
                reference=f"{n / reference_t.median:.0f} sent/s (SentenceTransformer.encode)",
                ratio=f"{ratio:.2f}x",
                target=">= 1.0x",
                passed=ratio >= 1.0,
                details={"precision": precision, "ours_s": ours_t.samples, "reference_s": reference_t.samples},
            )
        )
        del model
    return rows


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------


def reference_training(
    train: Path, store: Path, teacher: str, student: str, args: argparse.Namespace, work: Path, precision: str
) -> dict[str, Any]:
    """``SentenceTransformerTrainer`` + ``MSELoss`` on the same pairs, student build and batch as ours."""
    import torch

    from bench.perf.reference_training import train_reference
    from xdistill.data.parallel_tsv import read_parallel_pairs
    from xdistill.teacher.store import TeacherStore
    from xdistill.training.student import StudentConfig, build_student

    pairs = read_parallel_pairs(train)
    targets = TeacherStore.open(store, teacher_spec=teacher).lookup(pairs.sources)
    torch.manual_seed(1)
    config = StudentConfig(student, max_seq_length=args.max_seq_length, **STUDENT_OPTIONS)
    model = build_student(config, device=args.device, teacher_dim=TEACHER_DIM, raw_dir=None)
    return train_reference(
        model,
        pairs.sources,
        pairs.translations,
        targets,
        batch_size=args.batch_size,
        steps=args.steps,
        output_dir=work / f"reference-{precision}",
        device=args.device,
        precision=precision,
    )


def training_rows(
    train: Path, dev: Path, store: Path, teacher: str, student: str, args: argparse.Namespace, work: Path
) -> list[Row]:
    rows = []
    for precision in args.train_precisions:
        params = train_params(
            device=args.device,
            precision=precision,
            steps=args.steps,
            batch_size=args.batch_size,
            max_seq_length=args.max_seq_length,
        )
        ours = run_training(work / f"ours-{precision}", train, dev, store, teacher, student, params)
        try:
            reference: dict[str, Any] | None = reference_training(train, store, teacher, student, args, work, precision)
            reference_text = f"{reference['pairs_per_second']:.1f} pairs/s (SentenceTransformerTrainer + MSELoss)"
            ratio = ours["pairs_per_second"] / reference["pairs_per_second"]
        except Exception as exc:  # e.g. datasets missing or failing here: ours is still measured and reported
            traceback.print_exc()
            reference, reference_text, ratio = None, f"failed: {type(exc).__name__}: {exc}"[:200], float("nan")
        rows.append(
            Row(
                benchmark=f"train throughput, {args.student_label} in {precision}, MSE to {TEACHER_DIM}-d vectors "
                f"({args.steps} steps x {args.batch_size} pairs, max_seq_length {args.max_seq_length}, {args.gpu})",
                ours=f"{ours['pairs_per_second']:.1f} pairs/s",
                reference=reference_text,
                ratio=f"{ratio:.2f}x" if reference else "-",
                target=">= 1.0x",
                passed=(ratio >= 1.0) if reference else None,
                details={"precision": precision, "ours": {k: v for k, v in ours.items() if k != "student"}},
            )
        )
    return rows


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (with --tiny: the smoke run)")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes and counts (seconds)")
    parser.add_argument("--json", type=Path, default=None, help="where the rows go (default: $OUT or gpu-check-out)")
    parser.add_argument("--pairs", type=int, default=None, help="training pairs (default 4096; --tiny 48)")
    parser.add_argument("--steps", type=int, default=None, help="optimiser steps a run (default 60; --tiny 3)")
    parser.add_argument("--batch-size", type=int, default=None, help="pairs a step (default 64; --tiny 8)")
    parser.add_argument("--max-seq-length", type=int, default=64)
    parser.add_argument("--sentences", type=int, default=None, help="sentences encoded (default 8192; --tiny 96)")
    parser.add_argument("--encode-batch-size", type=int, default=None, help="default 128; --tiny 16")
    parser.add_argument("--repeats", type=int, default=None, help="timed encodings a side (default 3; --tiny 1)")
    parser.add_argument("--skip-train", action="store_true", help="only the encoding rows")
    parser.add_argument("--skip-encode", action="store_true", help="only the training rows")
    args = parser.parse_args(argv)
    tiny = args.tiny
    for name, full, small in (
        ("pairs", 4096, 48),
        ("steps", 60, 3),
        ("batch_size", 64, 8),
        ("sentences", 8192, 96),
        ("encode_batch_size", 128, 16),
        ("repeats", 3, 1),
    ):
        if getattr(args, name) is None:
            setattr(args, name, small if tiny else full)
    on_gpu = args.device.startswith("cuda")
    args.train_precisions = ["fp32", "bf16"] if on_gpu else ["fp32"]
    args.encode_precisions = ["fp32", "fp16"] if on_gpu else ["fp32"]
    args.student_shape, args.teacher_shape = (TINY_BERT, TINY_MPNET) if tiny else (ME5_SMALL, MPNET_BASE)
    args.student_label = "tiny BERT student" if tiny else "mE5-small-shaped student"
    args.teacher_label = "tiny MPNet teacher" if tiny else "all-mpnet-base-v2-shaped teacher"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(
            "error: no CUDA device here (torch.cuda.is_available() is False): the GPU check needs one; "
            "`python -m bench.perf.gpu_check --device cpu --tiny` runs its code on tiny shapes on a CPU",
            file=sys.stderr,
        )
        return 2
    args.gpu = device_name(args.device)
    print(f"gpu_check on {args.gpu} (torch {torch.__version__}, CUDA {torch.version.cuda})", flush=True)
    started = time.perf_counter()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="gpu_check-") as tmp:
        work = Path(tmp)
        words = synthetic_words(1500 if not args.tiny else 600)
        teacher = str(build_model_folder(work / "teacher", args.teacher_shape, words, normalize=True))
        if not args.skip_encode:
            rows += encoding_rows(teacher, synthetic_sentences(args.sentences, words, seed=3), args)
            print_rows(rows)
        if not args.skip_train:
            student = str(build_model_folder(work / "student", args.student_shape, words, normalize=True, seed=1))
            n_dev = 16
            sources = synthetic_sentences(args.pairs + n_dev, words, seed=1)
            translations = synthetic_sentences(args.pairs + n_dev, words, seed=2)
            train, dev = write_parallel_files(work / "data", sources, translations, n_dev=n_dev)
            store = write_random_teacher_store(work / "store", teacher, sources, TEACHER_DIM)
            train_rows = training_rows(train, dev, store, teacher, student, args, work)
            print_rows(train_rows)
            rows += train_rows
    write_json(args, rows, time.perf_counter() - started)
    return 0


def write_json(args: argparse.Namespace, rows: list[Row], seconds: float) -> Path:
    """The rows in the format of ``bench/results/*.json`` (the machine: the device's name)."""
    import torch

    path = args.json or default_json_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "name": "gpu_check",
        "command": "python -m bench.perf.gpu_check " + " ".join(sys.argv[1:]),
        "machine": f"{args.gpu}, torch {torch.__version__}, Python {platform.python_version()}",
        "date": date.today().isoformat(),
        "seconds": round(seconds, 1),
        "rows": [asdict(row) for row in rows],
    }
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {path} ({seconds:.0f} s)")
    return path


if __name__ == "__main__":
    sys.exit(main())
