"""Lightweight students: vocabulary trimming and the exports, against today's fp32 student.

Side by side in one run, the reference being ``SentenceTransformer.encode`` of the fp32 384-d
student (``--student``, default models/student):

1. vocabulary trimming (``train.student.vocabulary: corpus``: the pieces data/parallel and the
   staged evaluation sets of the configured languages use): parameters, disk size, load time
   and peak memory of loading (each in a fresh process), full vs trimmed;
2. each export of the trimmed student (``xdistill export``: fp16 safetensors, ONNX fp32, ONNX
   int8) and the trimmed PyTorch student: encoding speed (sentences/s, ``SentenceTransformer.encode``
   of ``--sentences`` real sentences, batch 64, torch's threads for every backend, repeats
   alternating with the reference), model size on disk and parameters, index size, and the quality
   delta on STS17 and Tatoeba (the pipeline's protocol: official STS17 tracks, Tatoeba test sets
   of ``languages`` in params.yaml, ``--tatoeba-pairs`` (1000 = all) pairs each) against the reference.

Targets: >= 3x the reference's encoding speed with <= 1 point loss on the STS17 and
Tatoeba averages; <= 50M parameters and <= 100 MB on disk.

    python -m bench.perf.export                   # needs models/student, data/parallel, data/raw (dvc repro)
    python -m bench.perf.export --light "6 layers=PATH"   # + a trained light student, PyTorch fp32 and ONNX int8
    python -m bench.perf.export --tiny            # seconds-to-minutes smoke run; prints only
    python -m bench.perf.export tatoeba-all       # Tatoeba, 112 languages: untrained mE5 full vs trimmed
                                                   # (BENCHMARKS.md section "vocabulary")
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.machine import machine_summary
from bench.paths import REPO_ROOT, RESULTS_DIR
from bench.perf.common import Row, Timing, alternate, real_sentences, report_rows

SPEED_TARGET = 3.0
MAX_LOSS_POINTS = 1.0
MAX_PARAMETERS = 50_000_000
MAX_DISK_MB = 100.0
BATCH = 64
DEFAULT_BASE = "pypi:multilingual-e5-small"
# Loading a student in a fresh process: load time and peak memory (ru_maxrss of that process).
LOAD_PROBE = """
import json, resource, sys, time
start = time.perf_counter()
from xdistill.export.runtime import load_student
model = load_student(sys.argv[1], sys.argv[2], device="cpu")
model.encode(["warm-up sentence"])
print(json.dumps({"load_s": time.perf_counter() - start,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def load_probe(folder: Path, backend: str) -> dict[str, float]:
    """Load time (imports included) and peak RSS of loading ``folder`` with ``backend`` in a new process."""
    out = subprocess.run(
        [sys.executable, "-c", LOAD_PROBE, str(folder), backend],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO_ROOT,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def disk_mb(folder: Path, backend: str) -> float:
    """What ``backend`` loads from ``folder``: everything but the other backends' weight files."""
    from xdistill.export.files import ONNX_FILES
    from xdistill.export.runtime import folder_size_mb

    others = [path for name, path in ONNX_FILES.items() if path and name != backend]
    if backend != "torch":
        others.append("model.safetensors")
    return round(folder_size_mb(folder, exclude=others), 1)


def trim_student(student: Path, out: Path, parallel: list[Path], raw_dir: Path) -> dict[str, Any]:
    from sentence_transformers import SentenceTransformer

    from xdistill.models.vocabulary import corpus_texts, trim_vocabulary
    from xdistill.training.student import save_student

    model = SentenceTransformer(str(student), device="cpu")
    trim = trim_vocabulary(model, corpus_texts(parallel, raw_dir))
    save_student(model, out)
    return trim.as_dict()


def quality(model, languages: list[str], eval_dir: Path, tatoeba_pairs: int) -> dict[str, float]:
    """STS17 and Tatoeba averages as the evaluate stage computes them."""
    from xdistill.evaluation.settings import EvaluationInputs, EvaluationSettings
    from xdistill.evaluation.suite import evaluate_model
    from xdistill.models.encoders import SentenceTransformerEncoder

    settings = EvaluationSettings(
        languages=languages,
        benchmarks=["sts17", "tatoeba"],
        sts17_max_pairs=40 if tatoeba_pairs < 200 else None,
        tatoeba_max_pairs=tatoeba_pairs,
        pca_sentences=0,
    )
    result = evaluate_model(SentenceTransformerEncoder(model, "bench"), "bench", settings, EvaluationInputs(eval_dir))
    return {
        "sts17": result["benchmarks"]["sts17"]["scores"]["average"],
        "tatoeba": result["benchmarks"]["tatoeba"]["scores"]["average"],
    }


def trimming_row(student: Path, trimmed: Path, trim: dict[str, Any]) -> Row:
    full, small = load_probe(student, "torch"), load_probe(trimmed, "torch")
    facts = {name: _parameters(folder) for name, folder in (("full", student), ("trimmed", trimmed))}
    full_mb, small_mb = disk_mb(student, "torch"), disk_mb(trimmed, "torch")
    return Row(
        benchmark=(
            f"vocabulary trimming (train.student.vocabulary: corpus; {trim['pieces_after']:,} of "
            f"{trim['pieces_before']:,} pieces kept): parameters, disk, load time, peak memory of loading"
        ),
        ours=(
            f"{facts['trimmed'] / 1e6:.1f}M params, {small_mb:.0f} MB, load {small['load_s']:.1f} s, "
            f"peak {small['peak_mb']:.0f} MB"
        ),
        reference=(
            f"{facts['full'] / 1e6:.1f}M params, {full_mb:.0f} MB, load {full['load_s']:.1f} s, "
            f"peak {full['peak_mb']:.0f} MB (full vocabulary)"
        ),
        ratio=f"{facts['full'] / facts['trimmed']:.2f}x fewer params, {full_mb / small_mb:.2f}x smaller",
        target="none (what trimming keeps and costs; its Tatoeba cost per language: section vocabulary)",
        passed=None,
        details={
            "trim": trim,
            "full": {**full, "parameters": facts["full"], "disk_mb": full_mb},
            "trimmed": {**small, "parameters": facts["trimmed"], "disk_mb": small_mb},
        },
    )


def _parameters(folder: Path) -> int:
    """Parameters stored in the folder's safetensors files (the transformer and any Dense head)."""
    from safetensors import safe_open

    total = 0
    for path in folder.rglob("*.safetensors"):
        with safe_open(str(path), "pt") as handle:
            for key in handle.keys():
                count = 1
                for size in handle.get_slice(key).get_shape():
                    count *= size
                total += count
    return total


def export_rows(
    student: Path,
    variants: dict[str, tuple[Path, str]],
    sentences: list[str],
    languages: list[str],
    eval_dir: Path,
    repeats: int,
    tatoeba_pairs: int,
) -> list[Row]:
    """One row per ``{label: (folder, backend)}``: speed beside the fp32 ``student``, size, quality delta."""
    import torch

    from xdistill.export.runtime import load_student

    reference = load_student(student, "torch", device="cpu")
    reference_quality = quality(reference, languages, eval_dir, tatoeba_pairs)
    reference_mb = disk_mb(student, "torch")
    reference_params = _parameters(student)
    dimension = int(reference.get_embedding_dimension())
    index_mb = dimension * 4 * 1_000_000 / 2**20
    rows = []
    for label, (folder, backend) in variants.items():
        model = load_student(folder, backend, device="cpu")
        scores = quality(model, languages, eval_dir, tatoeba_pairs)
        for encoder in (model, reference):
            encoder.encode(sentences[:BATCH], batch_size=BATCH)  # warm-up
        ours, ref = alternate(
            lambda m=model: m.encode(sentences, batch_size=BATCH),
            lambda: reference.encode(sentences, batch_size=BATCH),
            repeats,
        )
        rows.append(
            _export_row(
                label,
                backend,
                folder,
                len(sentences),
                ours,
                ref,
                scores,
                reference_quality,
                reference_mb,
                reference_params,
                int(model.get_embedding_dimension()),
                index_mb,
                torch.get_num_threads(),
            )
        )
    return rows


def _export_row(
    label: str,
    backend: str,
    folder: Path,
    n: int,
    ours: Timing,
    ref: Timing,
    scores: dict[str, float],
    reference_quality: dict[str, float],
    reference_mb: float,
    reference_params: int,
    dimension: int,
    index_mb: float,
    threads: int,
) -> Row:
    speedup = ref.median / ours.median
    deltas = {k: scores[k] - reference_quality[k] for k in scores}
    size = disk_mb(folder, backend)
    parameters = _parameters(folder) if backend == "torch" else None
    params_text = f"{parameters / 1e6:.1f}M params, " if parameters else ""
    passed = speedup >= SPEED_TARGET and all(d >= -MAX_LOSS_POINTS for d in deltas.values())
    return Row(
        benchmark=(
            f"encode {n} sentences (SentenceTransformer.encode, batch {BATCH}, {threads} threads): "
            f"{label} vs the fp32 student"
        ),
        ours=(
            f"{n / ours.median:.0f} sent/s; STS17 {scores['sts17']:.1f} ({deltas['sts17']:+.1f}), Tatoeba "
            f"{scores['tatoeba']:.1f} ({deltas['tatoeba']:+.1f}); {params_text}{size:.0f} MB; index {dimension}-d, "
            f"{dimension * 4 * 1_000_000 / 2**20:.0f} MB / 1M sentences"
        ),
        reference=(
            f"{n / ref.median:.0f} sent/s; STS17 {reference_quality['sts17']:.1f}, Tatoeba "
            f"{reference_quality['tatoeba']:.1f}; {reference_params / 1e6:.1f}M params, {reference_mb:.0f} MB; "
            f"index {index_mb:.0f} MB / 1M"
        ),
        ratio=f"{speedup:.2f}x faster, {reference_mb / size:.1f}x smaller",
        target=f">= {SPEED_TARGET:.0f}x with <= {MAX_LOSS_POINTS:.0f} point loss",
        passed=passed,
        details={
            "folder": str(folder),
            "backend": backend,
            "sentences": n,
            "threads": threads,
            "disk_mb": size,
            "parameters": parameters,
            "scores": scores,
            "reference_scores": reference_quality,
            "deltas": deltas,
            "size_target_met": (size <= MAX_DISK_MB and (parameters or 0) <= MAX_PARAMETERS),
            "ours_s": ours.samples,
            "reference_s": ref.samples,
        },
    )


def run_speed(args: argparse.Namespace) -> None:
    import yaml

    from xdistill.export.files import REPORT_FILE
    from xdistill.export.writer import ExportReport, export_student

    languages = args.languages or yaml.safe_load((REPO_ROOT / "params.yaml").read_text(encoding="utf-8"))["languages"]
    student = Path(args.student).resolve()
    if not (student / "modules.json").is_file():
        sys.exit(f"error: {student}: no student folder; run `dvc repro` first (or pass --student)")
    parallel_dir, raw_dir = Path(args.parallel_dir), Path(args.raw_dir)
    parallel = [parallel_dir / "train.tsv.gz", parallel_dir / "dev.tsv.gz"]
    with tempfile.TemporaryDirectory(prefix="bench-export-", dir=args.work_dir) as tmp:
        trimmed, exported = Path(tmp) / "trimmed", Path(tmp) / "exported"
        trim = trim_student(student, trimmed, parallel, raw_dir)
        if args.exported:  # an earlier run's export of the same trimmed student (exporting takes minutes)
            exported = Path(args.exported)
            report = ExportReport(**json.loads((exported / REPORT_FILE).read_text(encoding="utf-8")))
        else:
            report = export_student(trimmed, exported)
        variants = {
            "trimmed vocabulary, PyTorch fp32": (trimmed, "torch"),
            "trimmed, fp16 safetensors (run as fp32 on CPU)": (exported, "torch"),
            "trimmed, ONNX fp32 (onnxruntime)": (exported, "onnx"),
            "trimmed, ONNX dynamic int8 (onnxruntime)": (exported, "onnx-int8"),
        }
        for label, folder in light_students(args.light):  # smaller students: as trained, and their fastest export
            light_export = Path(tmp) / f"light-{len(variants)}"
            export_student(folder, light_export)
            variants[f"{label}, PyTorch fp32"] = (folder, "torch")
            variants[f"{label}, ONNX dynamic int8"] = (light_export, "onnx-int8")
        rows = [trimming_row(student, trimmed, trim)]
        rows += export_rows(
            student,
            variants,
            real_sentences(args.sentences),
            languages,
            raw_dir / "eval",
            args.repeats,
            args.tatoeba_pairs,
        )
        rows[0].details["export_report"] = report.as_dict()
        if args.keep:
            import shutil

            shutil.copytree(exported, args.keep, dirs_exist_ok=True)
    report_rows("export", rows, args.tiny, args.json)


def light_students(specs: list[str]) -> list[tuple[str, Path]]:
    """``LABEL=FOLDER`` pairs of ``--light`` (a trained light student, e.g. a quality-run light row's
    registered model), checked to be student folders."""
    found = []
    for spec in specs:
        label, sep, folder = spec.partition("=")
        if not sep or not (Path(folder) / "modules.json").is_file():
            sys.exit(f"error: --light {spec!r}: expected LABEL=FOLDER with a sentence-transformers folder")
        found.append((label, Path(folder)))
    return found


def run_tatoeba_all(args: argparse.Namespace) -> None:
    """Tatoeba on every language: the untrained mE5 student (``--base``) with the full vs the trimmed vocabulary.

    The trimmed copy keeps the pieces of ``--parallel-dir`` and ``--raw-dir``'s evaluation sets (the
    configured languages and English); the rows compare the two on all languages, on the configured
    ones (expected: identical, their sentences tokenise to the same pieces) and on the rest.
    """
    from bench.paths import mirror_dir
    from bench.quality.tatoeba_all import run_tatoeba_all as score_all
    from xdistill.models import resolve_model_dir

    out = Path(args.work_dir) if args.work_dir else RESULTS_DIR / "vocabulary_tatoeba_all"
    trimmed = out / ".trimmed-e5"  # not committed (.gitignore)
    if not (trimmed / "modules.json").is_file():
        parallel_dir = Path(args.parallel_dir)
        trim_student(
            resolve_model_dir(args.base),
            trimmed,
            [parallel_dir / "train.tsv.gz", parallel_dir / "dev.tsv.gz"],
            Path(args.raw_dir),
        )
    earlier = RESULTS_DIR / "quality" / "tatoeba_all" / "student-untrained.json"
    reuse = args.base == DEFAULT_BASE and args.max_pairs is None and args.codes is None
    if reuse and not (out / "e5-untrained-full.json").is_file() and earlier.is_file():
        # the quality run already scored the same untrained student on all languages: reuse it
        out.mkdir(parents=True, exist_ok=True)
        (out / "e5-untrained-full.json").write_text(earlier.read_text(encoding="utf-8"), encoding="utf-8")
    score_all(
        {"e5-untrained-full": args.base, "e5-untrained-trimmed": str(trimmed)},
        mirror_dir() / "eval" / "tatoeba-laser",
        out,
        codes=args.codes,
        max_pairs=args.max_pairs,
    )
    scores = {
        key: json.loads((out / f"{key}.json").read_text(encoding="utf-8"))["scores"]
        for key in ("e5-untrained-full", "e5-untrained-trimmed")
    }
    rows = trimming_tatoeba_rows(
        scores["e5-untrained-full"],
        scores["e5-untrained-trimmed"],
        configured_tatoeba_codes(args.languages),
        args.max_pairs,
    )
    report_rows("vocabulary", rows, args.tiny or args.max_pairs is not None or args.codes is not None, args.json)
    print(machine_summary())


def configured_tatoeba_codes(languages: list[str] | None) -> list[str]:
    """Tatoeba (ISO 639-3) codes of the configured languages (``--languages``, else params.yaml)."""
    from xdistill.data.languages import placeholders
    from xdistill.io import load_params

    languages = languages or load_params(path=REPO_ROOT / "params.yaml")["languages"]
    return [placeholders(lang)["lang3"] for lang in languages]


def trimming_tatoeba_rows(
    full: dict[str, dict], trimmed: dict[str, dict], configured: list[str], max_pairs: int | None
) -> list[Row]:
    """Rows comparing per-language Tatoeba accuracy (mean of both directions) of the trimmed and full student."""
    codes = sorted(set(full) & set(trimmed))
    kept = [code for code in codes if code in configured]
    others = [code for code in codes if code not in configured]
    pairs = "every pair" if max_pairs is None else f"first {max_pairs} pairs"
    rows = []
    for label, group, no_loss_expected in (
        (f"all {len(codes)} languages", codes, False),
        (f"the configured languages ({', '.join(kept)})", kept, True),
        (f"the other {len(others)} languages", others, False),
    ):
        if not group:
            continue
        ours = sum(trimmed[code]["average"] for code in group) / len(group)
        reference = sum(full[code]["average"] for code in group) / len(group)
        losses = sorted((trimmed[code]["average"] - full[code]["average"], code) for code in group)
        worst = ", ".join(f"{code} {delta:+.1f}" for delta, code in losses[:5] if delta < 0) or "none"
        rows.append(
            Row(
                benchmark=(
                    f"Tatoeba accuracy ({pairs} per language, both directions), untrained mE5-small with the "
                    f"trimmed vocabulary (train.student.vocabulary: corpus) vs the full one: {label}"
                ),
                ours=f"{ours:.1f} (largest losses: {worst})",
                reference=f"{reference:.1f} (full vocabulary)",
                ratio=f"{ours - reference:+.1f} points",
                target="no loss (their sentences tokenise to the same pieces)"
                if no_loss_expected
                else "none (languages outside the configuration are expected to lose)",
                passed=ours - reference >= -0.05 if no_loss_expected else None,
                details={
                    "languages": group,
                    "trimmed": ours,
                    "full": reference,
                    "per_language_delta": {code: round(delta, 2) for delta, code in losses},
                },
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", nargs="?", choices=("speed", "tatoeba-all"), default="speed")
    parser.add_argument("--student", default=str(REPO_ROOT / "models/student"), help="the fp32 student (reference)")
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-pairs", type=int, default=None, help="tatoeba-all: pairs per language")
    parser.add_argument("--codes", nargs="+", default=None, help="tatoeba-all: Tatoeba language codes (default: all)")
    parser.add_argument("--base", default=DEFAULT_BASE, help="tatoeba-all: the untrained student to trim")
    parser.add_argument("--tatoeba-pairs", type=int, default=1000, help="Tatoeba pairs per language (quality)")
    parser.add_argument("--exported", default=None, help="reuse this export of the trimmed student")
    parser.add_argument("--work-dir", default=None, help="where the trimmed student and exports are written")
    parser.add_argument("--keep", default=None, help="copy the exported folder here")
    parser.add_argument(
        "--parallel-dir", default=str(REPO_ROOT / "data/parallel"), help="train/dev pairs (trimming corpus)"
    )
    parser.add_argument(
        "--raw-dir", default=str(REPO_ROOT / "data/raw"), help="staged corpora: eval/ sets (trimming, quality)"
    )
    parser.add_argument("--languages", nargs="+", default=None, help="Tatoeba languages (default: params.yaml)")
    parser.add_argument(
        "--light",
        nargs="*",
        default=[],
        metavar="LABEL=FOLDER",
        help="also time these light students (PyTorch fp32 and ONNX int8) against the fp32 student",
    )
    parser.add_argument("--json", default=None, help="also write the rows here (tests)")
    parser.add_argument("--tiny", action="store_true", help="small sizes; print only")
    args = parser.parse_args()
    if args.tiny:
        args.sentences, args.repeats, args.tatoeba_pairs = 64, 1, 100
    (run_tatoeba_all if args.command == "tatoeba-all" else run_speed)(args)


if __name__ == "__main__":
    main()
