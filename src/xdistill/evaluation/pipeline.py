"""The two evaluation stages: baselines (teacher, untrained student, mUSE) and the trained student.

``run_baselines`` evaluates the reference models once (the English-only teacher on the English sets
alone) and stores each result as
``data/baselines/<label>.json``, with the teacher's and the untrained student's encodings in
``data/baselines/encodings/``; ``run_start_evaluation`` evaluates the student as training started and
``run_student_evaluation`` the trained student, writing every output with the stored baselines side
by side. Splitting them lets DVC skip the baselines (minutes of encoding) when only training changes;
the stored encodings spare the later stages the teacher's encoding and, where the start's head allows,
the start's (:mod:`xdistill.evaluation.shared_encodings`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from xdistill.data.eval_formats import is_decontaminated_bucc_folder
from xdistill.errors import InputFileError, XdistillError
from xdistill.evaluation.encoding import CachedEncoder
from xdistill.evaluation.labels import (
    LABEL_ORDER,
    MUSE_LABEL,
    START_LABEL,
    STUDENT_LABEL,
    TEACHER_LABEL,
    UNTRAINED_LABEL,
)
from xdistill.evaluation.plots import write_plots
from xdistill.evaluation.report import write_benchmark_outputs, write_summary
from xdistill.evaluation.settings import EvaluationInputs, EvaluationSettings, evaluation_protocol
from xdistill.evaluation.shared_encodings import derive_start, reuse_teacher, save_encodings
from xdistill.evaluation.suite import evaluate_model
from xdistill.io import atomic_path, write_json_atomic

logger = logging.getLogger(__name__)

MUSE_SPEC = "pypi:muse"
ENCODINGS_FOLDER = "encodings"  # in the baselines' folder: the vectors the later stages reuse


def baseline_specs(models: dict[str, str], settings: EvaluationSettings) -> dict[str, str]:
    """``{label: spec}`` of the reference models: the teacher, the untrained student, mUSE (optional)."""
    missing = [key for key in ("teacher", "student") if not models.get(key)]
    if missing:
        raise XdistillError(f"params.yaml models: missing {', '.join(missing)} (model specs of the baselines)")
    specs = {TEACHER_LABEL: models["teacher"], UNTRAINED_LABEL: models["student"]}
    if settings.muse:
        specs[MUSE_LABEL] = MUSE_SPEC
    return specs


@contextlib.contextmanager
def prepared_inputs(
    raw_dir: str | Path, settings: EvaluationSettings, dev_path: str | Path | None
) -> Iterator[EvaluationInputs]:
    """The run's inputs; builds the FLORES BUCC-style mining benchmarks in a temporary folder.

    A benchmark is deterministic for a seed (see :mod:`xdistill.mining.flores`), so building it
    per run instead of storing it keeps the stages' outputs small at the cost of a second of I/O.
    ``evaluate.mining_repeats`` constructions (seeds ``mining_seed``, ``mining_seed + 1``, ...)
    are built: with 13 gold pairs per language and split, one construction's F1 moves by ~8
    points per pair found or missed, so the reported F1 is the mean over constructions.
    """
    eval_dir = Path(raw_dir) / "eval"
    if not eval_dir.is_dir():
        raise XdistillError(f"{eval_dir}: evaluation data folder not found (run the `corpora` stage first)")
    dev = None
    if ({"dev", "teacher_space"} & set(settings.benchmarks)) and dev_path is not None:  # both score dev pairs
        dev = Path(dev_path)
        if not dev.is_file():
            raise InputFileError(dev, "held-out dev file not found (run the `parallel` stage first)")
    bucc = _checked_bucc_dir(eval_dir, settings.bucc_dir)
    with tempfile.TemporaryDirectory(prefix="xdistill-mining-") as tmp:
        flores_mining: list[Path] = []
        if "mining" in settings.benchmarks and settings.mining_flores:
            from xdistill.mining.flores import build_flores_bucc

            for repeat in range(settings.mining_repeats):
                folder = Path(tmp) / f"flores-bucc-{repeat}"
                build_flores_bucc(
                    eval_dir / "flores200-devtest",
                    folder,
                    [lang for lang in settings.languages if lang != "en"],
                    seed=settings.mining_seed + repeat,
                    gold_share=settings.mining_gold_share,
                )
                flores_mining.append(folder)
        yield EvaluationInputs(eval_dir=eval_dir, dev_path=dev, flores_mining_dirs=tuple(flores_mining), bucc_dir=bucc)


def _checked_bucc_dir(eval_dir: Path, bucc_dir: str | None) -> Path | None:
    """``evaluate.bucc_dir`` as a path, once it is known to be a folder whose files decontamination covers."""
    if not bucc_dir:
        return None
    bucc = Path(bucc_dir)
    if not bucc.is_dir():
        raise XdistillError(f"{bucc}: evaluate.bucc_dir is not a folder")
    if not is_decontaminated_bucc_folder(eval_dir, bucc):
        raise XdistillError(
            f"{bucc}: evaluate.bucc_dir must be a folder {eval_dir}/bucc<name>: only BUCC files "
            "staged there are kept out of the training data (stage them with corpora.datasets)"
        )
    return bucc


def _load_encoder(spec: str, settings: EvaluationSettings, adapter_from: str | Path | None = None) -> CachedEncoder:
    """The model behind ``spec`` (with its teacher-space adapter, where it has one: in its own folder or in
    ``adapter_from``) in ``evaluate.precision``, wrapped so each distinct sentence is embedded once per run."""
    from xdistill.adapter.model import load_encoder_with_adapter

    logger.info("loading %s", spec)
    encoder = load_encoder_with_adapter(spec, adapter_from=adapter_from)
    return CachedEncoder(in_precision(encoder, settings.precision), batch_size=settings.batch_size)


def in_precision(encoder: Any, precision: str) -> Any:
    """``encoder`` with its torch model cast to ``precision`` (``evaluate.precision``; half formats on a GPU only).

    mUSE (numpy on the CPU, no torch model) runs as it is: it is a fixed reference, not a model under test.
    """
    from xdistill.models.precision import DEFAULT_PRECISION, cast_for_inference

    model = getattr(encoder, "model", None)
    if precision != DEFAULT_PRECISION and model is not None:
        encoder.model = cast_for_inference(model, precision, "evaluate.precision")
    return encoder


def run_baselines(
    settings: EvaluationSettings,
    models: dict[str, str],
    raw_dir: str | Path,
    dev_path: str | Path | None,
    out_dir: str | Path,
) -> dict[str, dict[str, Any]]:
    """Evaluate every reference model; write ``out_dir/<label>.json`` (the folder replaced atomically)."""
    specs = baseline_specs(models, settings)
    results: dict[str, dict[str, Any]] = {}
    with prepared_inputs(raw_dir, settings, dev_path) as inputs, atomic_path(out_dir, is_dir=True) as tmp:
        teacher = _load_encoder(specs[TEACHER_LABEL], settings)
        for label, spec in specs.items():
            encoder = teacher if label == TEACHER_LABEL else _load_encoder(spec, settings)
            # the teacher is English-only: its scores of other languages would mean nothing, and cost a third
            # of the stage; its English vectors for the other models' teacher-space benchmarks are encoded anyway
            own = settings.english_only_copy() if label == TEACHER_LABEL else settings
            results[label] = {
                **evaluate_model(encoder, label, own, inputs, teacher=teacher),
                "settings": own.as_dict(),
            }
            logger.info("%s (%s): evaluated in %.0f s", label, spec, results[label]["seconds"])
            write_json_atomic(tmp / f"{label}.json", results[label])
            if label == UNTRAINED_LABEL:  # the start's vectors derive from these (evaluate_start)
                save_encodings(encoder, tmp / ENCODINGS_FOLDER, label)
            del encoder
        save_encodings(teacher, tmp / ENCODINGS_FOLDER, TEACHER_LABEL)  # after every model it was compared with
    return results


def load_baselines(baselines_dir: str | Path) -> dict[str, dict[str, Any]]:
    """Every ``<label>.json`` written by :func:`run_baselines`."""
    folder = Path(baselines_dir)
    if not folder.is_dir():
        raise XdistillError(f"{folder}: baselines folder not found (run `xdistill evaluate --baselines` first)")
    results: dict[str, dict[str, Any]] = {}
    files: dict[str, Path] = {}
    for path in sorted(folder.glob("*.json")):
        try:
            result = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise InputFileError(path, f"invalid JSON: {exc.msg}", exc.lineno) from None
        except UnicodeDecodeError:
            raise InputFileError(path, "not UTF-8 text") from None
        check_baseline(path, result)
        label = result.get("label", path.stem)
        if label in files:
            raise InputFileError(path, f"label '{label}' is also {files[label]}'s: one file a baseline")
        results[label], files[label] = result, path
    return results


def check_baseline(path: Path, result: Any) -> None:
    """Refuse a file shaped unlike :func:`run_baselines`' output before minutes of evaluation, not after."""
    if not isinstance(result, dict) or not isinstance(result.get("benchmarks"), dict):
        raise InputFileError(path, "not a baseline result (no 'benchmarks' mapping)")
    for name, benchmark in result["benchmarks"].items():
        if not isinstance(benchmark, dict) or not isinstance(benchmark.get("scores", {}), dict):
            raise InputFileError(path, f"benchmarks.{name}: expected a mapping with a 'scores' mapping")


def ordered(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Results in :data:`LABEL_ORDER`, other labels after, alphabetically."""
    rank = {label: i for i, label in enumerate(LABEL_ORDER)}
    return {label: results[label] for label in sorted(results, key=lambda x: (rank.get(x, len(rank)), x))}


def write_outputs(
    all_results: dict[str, dict[str, Any]],
    primary_label: str,
    languages: list[str],
    metrics_dir: str | Path,
    reports_dir: str | Path,
    plots_dir: str | Path,
    protocol: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Metrics, tables, summary and plots; each output folder replaced as a whole, atomically."""
    all_results = ordered(all_results)
    with (
        atomic_path(metrics_dir, is_dir=True) as metrics_tmp,
        atomic_path(reports_dir, is_dir=True) as reports_tmp,
        atomic_path(plots_dir, is_dir=True) as plots_tmp,
    ):
        write_benchmark_outputs(all_results, metrics_tmp, reports_tmp)
        summary = write_summary(all_results, primary_label, languages, metrics_tmp, reports_tmp, protocol)
        write_plots(all_results, plots_tmp)
    return summary


def run_start_evaluation(
    settings: EvaluationSettings,
    start_spec: str,
    teacher_spec: str,
    raw_dir: str | Path,
    dev_path: str | Path | None,
    out_dir: str | Path,
    adapter_from: str | Path | None = None,
    baselines_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Evaluate the student as training started into ``out_dir/student-start.json`` (its own DVC stage,
    so recipes that share the starting student share this evaluation through DVC's run cache), with the
    teacher-space adapter in ``adapter_from`` where that folder holds one (the ``start_adapter`` stage's).

    With ``baselines_dir`` (the baselines stage's output), the teacher reuses its stored vectors and the
    start's derive from the untrained student's where its head allows (:mod:`shared_encodings`)."""
    with prepared_inputs(raw_dir, settings, dev_path) as inputs:
        teacher = _load_encoder(teacher_spec, settings)
        model = _load_encoder(start_spec, settings, adapter_from)
        if baselines_dir is not None:
            reuse_teacher(teacher, Path(baselines_dir) / ENCODINGS_FOLDER, TEACHER_LABEL)
            derive_start(model, Path(baselines_dir) / ENCODINGS_FOLDER, UNTRAINED_LABEL)
        result = {
            **evaluate_model(model, START_LABEL, settings, inputs, teacher=teacher),
            "settings": settings.as_dict(),
        }
    logger.info("%s (%s): evaluated in %.0f s", START_LABEL, start_spec, result["seconds"])
    with atomic_path(out_dir, is_dir=True) as tmp:
        write_json_atomic(tmp / f"{START_LABEL}.json", result)
    return result


def run_student_evaluation(
    settings: EvaluationSettings,
    student_spec: str,
    teacher_spec: str,
    raw_dir: str | Path,
    dev_path: str | Path | None,
    baselines_dirs: Sequence[str | Path],
    metrics_dir: str | Path,
    reports_dir: str | Path,
    plots_dir: str | Path,
) -> dict[str, Any]:
    """Evaluate the trained student and write every output with the stored baselines side by side."""
    baselines: dict[str, dict[str, Any]] = {}
    for folder in baselines_dirs:
        baselines.update(load_baselines(folder))
    with prepared_inputs(raw_dir, settings, dev_path) as inputs:
        teacher = _load_encoder(teacher_spec, settings)
        for folder in baselines_dirs:
            reuse_teacher(teacher, Path(folder) / ENCODINGS_FOLDER, TEACHER_LABEL)
        student = _load_encoder(student_spec, settings)
        result = {
            **evaluate_model(student, STUDENT_LABEL, settings, inputs, teacher=teacher),
            "settings": settings.as_dict(),
        }
    logger.info("student (%s): evaluated in %.0f s", student_spec, result["seconds"])
    summary = write_outputs(
        {**baselines, STUDENT_LABEL: result},
        STUDENT_LABEL,
        settings.languages,
        metrics_dir,
        reports_dir,
        plots_dir,
        evaluation_protocol(settings.as_dict()),
    )
    logger.info("primary score %.2f (student)", summary.get("primary_score", float("nan")))
    return summary
