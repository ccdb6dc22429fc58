"""Training throughput (pairs/s): our distillation loop vs sentence-transformers' own trainer.

Both sides train the same student (default: mE5-small with a frozen word-embedding table; with
``--tiny``: a 1-layer MiniLM) with the Reimers & Gurevych MSE objective towards the same
precomputed teacher vectors (read from one TeacherStore), on the same pairs, batch size, step
count, learning-rate schedule, prompt and torch thread count, in one process:

- ours: :func:`xdistill.training.trainer.train_student` (pre-tokenised, length-bucketed batches,
  source and translation in one forward pass); throughput = pairs / time inside the steps;
- reference: ``SentenceTransformerTrainer`` + ``losses.MSELoss`` on a ``datasets.Dataset`` with
  ``english, non_english, label`` columns; throughput = pairs / ``train_runtime``.

Both sides also run with bf16 autocast on the CPU (ours: ``train.precision: bf16``; the reference:
``bf16=True``), and our bf16 step is compared with our fp32 step: what the lever gains on this CPU
(it pays off only with bf16 instructions, AVX512-BF16 or AMX; the row says whether this CPU has them).
On a CPU without them those rows are skipped unless ``--bf16`` asks for them: emulated bf16 takes tens of
minutes for what fp32 does in one.

The cached frozen layers (``train.student.freeze_layers: K`` with ``cache_frozen: true``) are compared with
the same frozen layers run at every step (``cache_frozen: false``), the default loss on both sides: the
steps' throughput, and the wall time of the whole run, which for the cached side includes the one pass that
computes the frozen layers' states of every training text.

The teacher embedding is done once, before timing (neither side pays for it).
Usage: ``python -m bench.perf.train [--tiny] [--pairs N] [--steps N] [--batch-size N] [--threads N]
[--frozen-layers K] [--frozen-steps N]
[--bf16 | --no-bf16]``.
"""

from __future__ import annotations

import argparse
import gzip
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import xdistill  # noqa: F401  (offline environment)
from bench.paths import REPO_ROOT, mirror_dir
from bench.perf.common import Row, peak_rss_mb, report_rows
from xdistill.data.parallel_tsv import write_parallel_tsv
from xdistill.training.tokenized import cpu_has_native_bf16

TEACHER = "pypi:all-minilm-l6-v2"
LANGS = ("ar", "de", "es", "tr")


def write_pairs(folder: Path, mirror: Path, n_pairs: int, n_dev: int) -> tuple[Path, Path]:
    """Real Tatoeba pairs from the mirror, mixed over four languages (short and long sentences)."""
    rows: list[tuple[str, str, str]] = []
    per_lang = (n_pairs + n_dev) // len(LANGS) + 1
    for lang in LANGS:
        path = mirror / f"train/tatoeba-challenge/tatoeba-challenge.minus-laser-test.en-{lang}.tsv.gz"
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            next(handle)
            lines = [line.rstrip("\n").split("\t")[:2] for line in handle]
        picked = np.random.default_rng(0).choice(len(lines), size=per_lang, replace=False)
        rows.extend((lines[i][0], lines[i][1], lang) for i in picked)
    order = np.random.default_rng(1).permutation(len(rows))
    rows = [rows[i] for i in order]
    paths = []
    for name, part in (("train", rows[:n_pairs]), ("dev", rows[n_pairs : n_pairs + n_dev])):
        path = folder / f"{name}.tsv.gz"
        write_parallel_tsv(path, ((en, xx, lang, "bench") for en, xx, lang in part))
        paths.append(path)
    return paths[0], paths[1]


def default_loss() -> dict:
    """params.yaml's ``train.loss`` section: the loss a `dvc repro` trains with (MSE + the ranking loss)."""
    import yaml

    return yaml.safe_load((REPO_ROOT / "params.yaml").read_text(encoding="utf-8"))["train"]["loss"]


def run_ours(
    train: Path,
    dev: Path,
    store: Path,
    student_spec: str,
    student_opts: dict,
    args,
    work: Path,
    loss: dict,
    name: str,
    precision: str = "fp32",
) -> dict:
    from xdistill.training.settings import OutputPaths, RuntimeSettings
    from xdistill.training.trainer import train_student

    params = {
        "seed": 1,
        "steps": args.steps,
        "batch_size": args.batch_size,
        "learning_rate": 5e-5,
        "warmup_ratio": 0.1,
        "max_seq_length": args.max_seq_length,
        "eval_every": 10**6,
        "checkpoint_every": 10**6,
        "early_stopping_patience": None,
        "dev_max_pairs": 16,
        "student": student_opts,
        "loss": loss,
        "precision": precision,
    }
    runtime = RuntimeSettings(threads=args.threads, log_every=max(1, args.steps // 4))
    start = time.perf_counter()
    result = train_student(
        train,
        dev,
        store,
        student_spec,
        params,
        OutputPaths(work / name, work / f"{name}-ckpt", None, None, None),
        teacher_spec=TEACHER,
        device="cpu",
        runtime=runtime,
    )
    wall = time.perf_counter() - start
    return {
        "pairs_per_second": result.pairs_per_second,
        "wall_seconds": wall,
        "train_seconds": result.train_seconds,
        "frozen_cache": result.frozen_cache,
        "train_loss_last": next(r["loss"] for r in reversed(result.history) if r["kind"] == "train"),
    }


def run_reference(
    train: Path, store: Path, student_spec: str, student_opts: dict, args, work: Path, bf16: bool = False
) -> dict:
    import torch

    from bench.perf.reference_training import train_reference
    from xdistill.models import default_prompt
    from xdistill.teacher.store import TeacherStore
    from xdistill.training.batches import read_parallel_pairs
    from xdistill.training.student import StudentConfig, build_student

    pairs = read_parallel_pairs(train)
    teacher = TeacherStore.open(store, teacher_spec=TEACHER).lookup(pairs.sources)
    torch.manual_seed(1)
    model = build_student(StudentConfig(student_spec, max_seq_length=args.max_seq_length, **student_opts))
    return train_reference(
        model,
        pairs.sources,
        pairs.translations,
        teacher,
        batch_size=args.batch_size,
        steps=args.steps,
        output_dir=work / "reference",
        precision="bf16" if bf16 else "fp32",
        prompt=default_prompt(model),
    )


def bf16_rows(
    ours_bf16: dict, ours_fp32: dict, reference_bf16: dict, setting: str, ranking: dict, details: dict
) -> list[Row]:
    """Our bf16-autocast step against our fp32 step (the lever's gain) and against the reference in bf16."""
    native = "with" if details["cpu_has_native_bf16"] else "WITHOUT"
    gain = ours_bf16["pairs_per_second"] / ours_fp32["pairs_per_second"]
    versus = ours_bf16["pairs_per_second"] / reference_bf16["pairs_per_second"]
    label = f"default loss (MSE + {ranking}), bf16 autocast on a CPU {native} bf16 instructions ({setting})"
    return [
        Row(
            benchmark=f"train throughput, {label}: train.precision bf16 vs fp32",
            ours=f"{ours_bf16['pairs_per_second']:.1f} pairs/s",
            reference=f"{ours_fp32['pairs_per_second']:.1f} pairs/s (ours in fp32)",
            ratio=f"{gain:.2f}x",
            target="none (what the lever gains on this CPU)",
            passed=None,
            details=details,
        ),
        Row(
            benchmark=f"train throughput, {label}: ours vs the reference trainer in bf16",
            ours=f"{ours_bf16['pairs_per_second']:.1f} pairs/s",
            reference=f"{reference_bf16['pairs_per_second']:.1f} pairs/s (SentenceTransformerTrainer, bf16=True)",
            ratio=f"{versus:.2f}x",
            target=">= 1.0x",
            passed=versus >= 1.0,
            details=details,
        ),
    ]


def frozen_cache_rows(cached: dict, uncached: dict, frozen_layers: int, setting: str, details: dict) -> list[Row]:
    """Cached frozen-layer states against the same frozen layers run at every step: steps, and whole runs."""
    label = f"train throughput, default loss, first {frozen_layers} layers frozen ({setting})"
    steps_ratio = cached["pairs_per_second"] / uncached["pairs_per_second"]
    # the whole run less what both sides share (loading, validation, export): the steps plus the cache pass
    cached_cost = cached["train_seconds"] + cached["frozen_cache"]["seconds"]
    run_ratio = uncached["train_seconds"] / cached_cost
    return [
        Row(
            benchmark=f"{label}: train.student.cache_frozen true vs false, the steps",
            ours=f"{cached['pairs_per_second']:.1f} pairs/s",
            reference=f"{uncached['pairs_per_second']:.1f} pairs/s (the frozen layers run at every step)",
            # the arithmetic of mE5-small with 8 of 12 layers frozen: 12 layers forward + 4 backward (~2 forward
            # passes each) against 4 + 4 backward: 20 against 12 layer-passes, 1.67x; less padding and no autograd
            # bookkeeping in the lower layers may add to it, Python-side gathering of the states takes from it
            ratio=f"{steps_ratio:.2f}x",
            target=">= 1.5x",
            passed=steps_ratio >= 1.5,
            details=details,
        ),
        Row(
            benchmark=f"{label}: cache_frozen true vs false, steps + the pass that computes the states",
            ours=(
                f"{cached_cost:.1f} s ({cached['train_seconds']:.1f} s steps + "
                f"{cached['frozen_cache']['seconds']:.1f} s states)"
            ),
            reference=f"{uncached['train_seconds']:.1f} s of steps",
            ratio=f"{run_ratio:.2f}x",
            target="none (the cache pass is paid once per run: more steps, more gain)",
            passed=None,
            details=details,
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tiny", action="store_true", help="1-layer MiniLM student, few pairs (seconds); results printed, not saved"
    )
    parser.add_argument("--pairs", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-length", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--student", default=None, help="student spec (default: params models.student)")
    parser.add_argument(
        "--mirror", type=Path, default=None, help="the corpora mirror (default: see bench.paths.mirror_dir)"
    )
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    parser.add_argument(
        "--bf16",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run the bf16 rows (default: only on a CPU with bf16 instructions)",
    )
    parser.add_argument(
        "--frozen-steps",
        type=int,
        default=40,
        help="steps of the cache_frozen rows (10 steps of ~0.2 s are too few to tell them apart)",
    )
    parser.add_argument(
        "--frozen-layers", type=int, default=8, help="layers frozen in the cache_frozen rows (0: skip them; --tiny: 1)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    import torch

    from xdistill.models import resolve_model_dir
    from xdistill.teacher.embed import build_teacher_store

    torch.set_num_threads(args.threads)
    if args.tiny:
        student_spec, student_opts = str(resolve_model_dir(TEACHER)), {"keep_layers": 1}
        args.pairs, args.steps, args.batch_size = args.pairs or 64, args.steps or 6, min(args.batch_size, 8)
    else:
        student_spec = args.student or "pypi:multilingual-e5-small"
        student_opts = {"freeze_word_embeddings": True}
        args.pairs, args.steps = args.pairs or 1024, args.steps or 24

    with tempfile.TemporaryDirectory(prefix="bench_train-") as tmp:
        work = Path(tmp)
        train, dev = write_pairs(work, args.mirror or mirror_dir(), args.pairs, 16)
        build_teacher_store([train, dev], work / "teacher", {"teacher": TEACHER, "batch_size": 64})
        ours = run_ours(train, dev, work / "teacher", student_spec, student_opts, args, work, {"mse": 1.0}, "ours")
        # the step `dvc repro` runs: the same MSE plus the in-batch ranking loss (a 32x32 similarity
        # matrix per step), so its cost is measured rather than assumed small
        loss = default_loss()
        ours_default = run_ours(
            train, dev, work / "teacher", student_spec, student_opts, args, work, loss, "ours-default"
        )
        reference = run_reference(train, work / "teacher", student_spec, student_opts, args, work)
        # emulated bf16 (a CPU without bf16 instructions) runs at a fraction of fp32's speed: ~30 min for both
        # sides at the default size on an AVX2 CPU, to learn what the lever's docs already say
        run_bf16 = args.bf16 or (args.bf16 is None and cpu_has_native_bf16())
        if run_bf16:
            ours_bf16 = run_ours(
                train,
                dev,
                work / "teacher",
                student_spec,
                student_opts,
                args,
                work,
                loss,
                "ours-default-bf16",
                precision="bf16",
            )
            reference_bf16 = run_reference(train, work / "teacher", student_spec, student_opts, args, work, bf16=True)
        frozen = (1 if args.tiny else args.frozen_layers) if args.frozen_layers else 0
        if frozen:
            # the tiny student's one layer would leave nothing to train: it keeps two here, the first frozen
            frozen_opts = {**student_opts, "freeze_layers": frozen, **({"keep_layers": 2} if args.tiny else {})}
            frozen_args = argparse.Namespace(**{**vars(args), "steps": args.steps if args.tiny else args.frozen_steps})
            ours_frozen = run_ours(
                train, dev, work / "teacher", student_spec, frozen_opts, frozen_args, work, loss, "ours-frozen"
            )
            ours_cached = run_ours(
                train,
                dev,
                work / "teacher",
                student_spec,
                {**frozen_opts, "cache_frozen": True},
                frozen_args,
                work,
                loss,
                "ours-frozen-cached",
            )

    size = f"{args.steps} steps x {args.batch_size} pairs, max_seq_length {args.max_seq_length}, {args.threads} threads"
    model = "tiny 1-layer MiniLM" if args.tiny else student_spec
    reference_text = f"{reference['pairs_per_second']:.1f} pairs/s (SentenceTransformerTrainer + MSELoss)"
    details = {
        "ours": ours,
        "ours_default_loss": ours_default,
        "default_loss": loss,
        "reference": reference,
        "ours_default_loss_bf16": ours_bf16 if run_bf16 else None,
        "reference_bf16": reference_bf16 if run_bf16 else None,
        "cpu_has_native_bf16": cpu_has_native_bf16(),
        "pairs": args.pairs,
        "peak_rss_mb": round(peak_rss_mb()),
    }
    hyper = ("mse", "temperature", "margin", "scale", "ranking_scale")  # the MSE and the losses' settings
    ranking = {k: v for k, v in loss.items() if k not in hyper and v}
    rows = []
    for label, result, target in (("MSE", ours, 1.2), (f"default loss: MSE + {ranking}", ours_default, 1.0)):
        ratio = result["pairs_per_second"] / reference["pairs_per_second"]
        rows.append(
            Row(
                benchmark=f"train throughput, {label} ({model}, {size})",
                ours=f"{result['pairs_per_second']:.1f} pairs/s",
                reference=reference_text,
                ratio=f"{ratio:.2f}x",
                target=f">= {target}x",
                passed=ratio >= target,
                details=details,
            )
        )
    if run_bf16:
        rows.extend(bf16_rows(ours_bf16, ours_default, reference_bf16, f"{model}, {size}", ranking, details))
    else:
        rows.append(
            Row(
                benchmark=f"train throughput, default loss, bf16 autocast ({model}, {size})",
                ours="not run: this CPU has no bf16 instructions (emulated bf16 is slower than fp32)",
                reference="-",
                ratio="-",
                target="none (--bf16 runs it anyway)",
                passed=None,
                details=details,
            )
        )
    if frozen:
        frozen_details = {
            **details,
            "ours_frozen": ours_frozen,
            "ours_frozen_cached": ours_cached,
            "frozen_layers": frozen,
        }
        frozen_size = size.replace(f"{args.steps} steps", f"{frozen_args.steps} steps", 1)
        rows.extend(frozen_cache_rows(ours_cached, ours_frozen, frozen, f"{model}, {frozen_size}", frozen_details))
    report_rows("train", rows, args.tiny, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
