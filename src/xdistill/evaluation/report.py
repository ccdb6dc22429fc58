"""Merge the results of several models into side-by-side metrics, tables and the summary.

Outputs (models as columns, the evaluated student first):

- ``metrics/eval/<benchmark>.json``: ``{model: {key: number}}`` (DVC metrics; per-language
  Tatoeba/mining detail is reduced to one number per language, the rest is in the tables);
- ``reports/eval/<benchmark>.csv`` and ``.md``: every score, one row per language/track/metric;
- ``metrics/eval/summary.json`` and ``reports/eval/summary.md``: headline numbers, the
  :func:`primary_score` and per-language scores the registry's promotion gate reads.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from xdistill.evaluation.labels import UNTRAINED_LABEL
from xdistill.evaluation.metrics import mean_or_nan
from xdistill.evaluation.sts import STS17_TRACKS, TR_EN_ALIGNMENT, TRACK_4B_NOTE
from xdistill.evaluation.tatoeba import tatoeba_code
from xdistill.io import write_json_atomic, write_text_atomic

BENCHMARK_TITLES: dict[str, str] = {
    "sts17": "STS17 (SemEval-2017 official tracks), Spearman x100",
    "sts_crosslingual": "Cross-lingual STSb (stsb-multi-mt test, STS2017-extended construction), Spearman x100",
    "sts_monolingual": "Monolingual STSb per language (stsb-multi-mt test), Spearman x100",
    "language_bias": "Language bias (Reimers & Gurevych Table 8): all STSb sets joined, Spearman x100",
    "tatoeba": "Tatoeba (LASER test set) translation retrieval accuracy %",
    "dev": "Held-out dev parallel data: MSE to the teacher (x100) and retrieval accuracy %",
    "mining_flores": "Bitext mining, FLORES-200 BUCC-style benchmark (P/R/F1 %)",
    "mining_bucc": "Bitext mining, official BUCC (P/R/F1 %)",
    "teacher_space": "Teacher-space compatibility: the teacher embeds English, the model the translation "
    "(retrieval accuracy % both ways; cross-model STSb, Spearman x100)",
    "teacher_space_adapter": "Teacher-space compatibility through the student's teacher-space adapter "
    "(xdistill encode --teacher-space): the teacher embeds English, the adapter maps "
    "the model's embedding of the translation (retrieval accuracy % both ways; "
    "cross-model STSb, Spearman x100)",
}

PRIMARY_SCORE_DEFINITION = (
    "primary_score = mean of three task scores, each 0-100, higher is better: STS = mean of the STS17 average "
    "(Spearman x100 over the six headline tracks, 4b excluded) and the STSb average (mean of its monolingual and "
    "cross-lingual averages); retrieval = the Tatoeba average (accuracy %, both directions, configured languages); "
    "mining = the FLORES BUCC-style mining F1 (mean over languages and constructions). A task a run did not "
    "measure drops out of the mean. Teacher-space compatibility is reported beside it, not inside: mUSE (another "
    "width) has no such score; the untrained student, when as wide as the teacher, is scored and lies near chance "
    "(it was never in the teacher's space)."
)
PER_LANGUAGE_DEFINITION = (
    "per_language[xx] = mean of the available scores among: Tatoeba average accuracy for xx, and the "
    "cross-lingual STS of xx (mean of the STS17 tracks pairing xx with English, else of the STSb en-xx/xx-en "
    "sets); per_language[en] = STS17 en-en."
)


def clean_number(value: Any) -> Any:
    """NaN/inf become None (JSON has no NaN and DVC cannot compare it)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def flatten(nested: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"deu": {"xx2en": 1}}`` -> ``{"deu.xx2en": 1}`` (key order kept)."""
    flat: dict[str, Any] = {}
    for key, value in nested.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = clean_number(value)
    return flat


def scores_of(results: Mapping[str, Any], benchmark: str) -> dict[str, Any] | None:
    return results.get("benchmarks", {}).get(benchmark, {}).get("scores")


def benchmarks_present(all_results: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Benchmarks any model has, in :data:`BENCHMARK_TITLES` order."""
    present = {name for r in all_results.values() for name in r.get("benchmarks", {})}
    return [name for name in BENCHMARK_TITLES if name in present]


def metrics_view(benchmark: str, scores: Mapping[str, Any]) -> dict[str, Any]:
    """The DVC-metrics form of a benchmark's scores: one number per language where detail abounds."""
    if benchmark == "tatoeba":
        return {k: clean_number(v["average"] if isinstance(v, Mapping) else v) for k, v in scores.items()}
    if benchmark.startswith("mining"):
        view = {k: clean_number(v["f1"]) for k, v in scores.items() if k != "average"}
        view.update({f"average_{k}": clean_number(v) for k, v in scores["average"].items()})
        return view
    return flatten(scores)


def table_rows(
    all_results: Mapping[str, Mapping[str, Any]], benchmark: str
) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """Row keys (union over models, first-seen order) and ``{label: {row: value}}``."""
    columns = {label: flatten(scores_of(r, benchmark) or {}) for label, r in all_results.items()}
    rows = list(dict.fromkeys(row for values in columns.values() for row in values))
    return rows, columns


def format_value(value: Any, row: str) -> str:
    if value is None:
        return "-"
    digits = 3 if "mse" in row else 1
    return f"{value:.{digits}f}"


def markdown_table(rows: list[str], columns: Mapping[str, Mapping[str, Any]], first: str = "") -> str:
    labels = list(columns)
    lines = [f"| {first} | " + " | ".join(labels) + " |", "|---|" + "---:|" * len(labels)]
    for row in rows:
        lines.append(f"| {row} | " + " | ".join(format_value(columns[label].get(row), row) for label in labels) + " |")
    return "\n".join(lines) + "\n"


def csv_table(rows: list[str], columns: Mapping[str, Mapping[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["key", *columns])
    for row in rows:
        writer.writerow(
            [row, *("" if columns[label].get(row) is None else f"{columns[label][row]:.4f}" for label in columns)]
        )
    return buffer.getvalue()


def benchmark_notes(all_results: Mapping[str, Mapping[str, Any]], benchmark: str) -> list[str]:
    """Reasons and protocol notes to print under a table."""
    notes: list[str] = []
    for label, results in all_results.items():  # the key: a baseline file without "label" is keyed by its name
        info = results.get("benchmarks", {}).get(benchmark, {}).get("info", {})
        notes += info.get("notes", [])
        for lang, reason in info.get("skipped", {}).items():
            notes.append(f"{label}: {lang} skipped ({reason})")
        if "n_pairs" in info and not notes:
            notes.append(f"pairs per set: {info['n_pairs']}")
    if benchmark == "language_bias":
        notes.append(
            "expected = mean of the per-set scores; actual = the score of all sets joined into one; "
            "difference = actual - expected (negative: the model rates same-language pairs higher)."
        )
    if benchmark == "dev":
        notes.append("MSE is left empty where the model's dimension differs from the teacher's.")
    return list(dict.fromkeys(notes))


def write_benchmark_outputs(
    all_results: Mapping[str, Mapping[str, Any]], metrics_dir: Path, reports_dir: Path
) -> list[str]:
    """One metrics JSON, CSV and Markdown table per benchmark; returns the benchmark names."""
    names = benchmarks_present(all_results)
    for benchmark in names:
        write_json_atomic(
            metrics_dir / f"{benchmark}.json",
            {
                label: metrics_view(benchmark, scores)
                for label, r in all_results.items()
                if (scores := scores_of(r, benchmark)) is not None
            },
        )
        rows, columns = table_rows(all_results, benchmark)
        write_text_atomic(reports_dir / f"{benchmark}.csv", csv_table(rows, columns))
        notes = "".join(f"\n- {note}" for note in benchmark_notes(all_results, benchmark))
        write_text_atomic(
            reports_dir / f"{benchmark}.md",
            f"# {BENCHMARK_TITLES[benchmark]}\n\n{markdown_table(rows, columns)}{notes}\n",
        )
    return names


def task_scores(results: Mapping[str, Any]) -> dict[str, float]:
    """The three task scores of :data:`PRIMARY_SCORE_DEFINITION` (NaN where not measured)."""
    get = lambda bench, key: (scores_of(results, bench) or {}).get(key)  # noqa: E731
    stsb = mean_or_nan([get("sts_monolingual", "average"), get("sts_crosslingual", "average")])
    mining = (scores_of(results, "mining_flores") or {}).get("average", {}).get("f1")
    return {
        "sts": mean_or_nan([get("sts17", "average"), stsb]),
        "retrieval": mean_or_nan([get("tatoeba", "average")]),
        "mining": mean_or_nan([mining]),
    }


def primary_score(results: Mapping[str, Any]) -> float:
    """See :data:`PRIMARY_SCORE_DEFINITION`; NaN for a model scored on the English sets alone (the teacher):
    its average of English STS would stand beside multilingual averages as if it were one of them."""
    if results.get("english_only"):
        return float("nan")
    return mean_or_nan(list(task_scores(results).values()))


def per_language_scores(results: Mapping[str, Any], languages: list[str]) -> dict[str, Any]:
    """See :data:`PER_LANGUAGE_DEFINITION`."""
    sts17 = scores_of(results, "sts17") or {}
    crosslingual = scores_of(results, "sts_crosslingual") or {}
    tatoeba = scores_of(results, "tatoeba") or {}
    per_language: dict[str, Any] = {}
    if "en-en" in sts17:
        per_language["en"] = clean_number(sts17["en-en"])
    for lang in languages:
        if lang == "en":
            continue
        tracks = [v for k, v in sts17.items() if k in STS17_TRACKS and k.startswith(f"{lang}-en") and k != "es-en-4b"]
        if not tracks:
            tracks = [v for k, v in crosslingual.items() if k in (f"en-{lang}", f"{lang}-en")]
        code = _tatoeba_code_or_none(lang)
        parts = [mean_or_nan(tracks) if tracks else None, tatoeba.get(code, {}).get("average") if code else None]
        per_language[lang] = clean_number(mean_or_nan(parts))
    return per_language


def _tatoeba_code_or_none(lang: str) -> str | None:
    try:
        return tatoeba_code(lang)
    except Exception:  # a language without a known ISO 639-3 code has no Tatoeba score
        return None


def headline(results: Mapping[str, Any]) -> dict[str, Any]:
    """The handful of numbers per model that the summary shows."""
    get = lambda bench, key: (scores_of(results, bench) or {}).get(key)  # noqa: E731
    mining = scores_of(results, "mining_flores") or {}
    dev_average = (scores_of(results, "dev") or {}).get("average", {})
    teacher_space = scores_of(results, "teacher_space") or {}
    adapter = scores_of(results, "teacher_space_adapter") or {}
    tasks = task_scores(results) if not results.get("english_only") else {}
    values = {
        "primary_score": primary_score(results),
        "task_sts": tasks.get("sts"),
        "task_retrieval": tasks.get("retrieval"),
        "task_mining": tasks.get("mining"),
        "sts17_average": get("sts17", "average"),
        "sts17_monolingual_average": get("sts17", "average_monolingual"),
        "sts17_crosslingual_average": get("sts17", "average_crosslingual"),
        "sts17_track4b": get("sts17", "es-en-4b"),
        "sts_crosslingual_average": get("sts_crosslingual", "average"),
        "sts_monolingual_average": get("sts_monolingual", "average"),
        "language_bias_difference": get("language_bias", "difference"),
        "tatoeba_average": get("tatoeba", "average"),
        "tatoeba_average_all": get("tatoeba", "average_all"),
        "mining_flores_f1": mining.get("average", {}).get("f1"),
        "dev_accuracy": dev_average.get("accuracy"),
        "dev_mse_translation_x100": dev_average.get("mse_translation_x100"),
        "teacher_space_flores_accuracy": teacher_space.get("flores", {}).get("average"),
        "teacher_space_flores_min": teacher_space.get("flores", {}).get("min"),
        "teacher_space_tatoeba_accuracy": teacher_space.get("tatoeba", {}).get("average"),
        "teacher_space_sts": teacher_space.get("sts", {}).get("average"),
        "teacher_space_adapter_flores_accuracy": adapter.get("flores", {}).get("average"),
        "teacher_space_adapter_flores_min": adapter.get("flores", {}).get("min"),
        "teacher_space_adapter_tatoeba_accuracy": adapter.get("tatoeba", {}).get("average"),
        "teacher_space_adapter_sts": adapter.get("sts", {}).get("average"),
    }
    return {k: clean_number(v) for k, v in values.items() if v is not None}


# ``metrics/scores.json``, the stage's DVC metrics: a few short columns for `dvc metrics show` and
# `dvc exp show` (summary.json holds every score, and would print lines of tens of thousands of characters)
SCORE_COLUMNS = {
    "primary": "primary_score",
    "sts17_xling": "sts17_crosslingual_average",
    "sts17_mono": "sts17_monolingual_average",
    "stsb_xling": "sts_crosslingual_average",
    "tatoeba": "tatoeba_average",
    "mining_f1": "mining_flores_f1",
    "bias": "language_bias_difference",
}


def headline_scores(summary: Mapping[str, Any]) -> dict[str, float]:
    """The student's headline scores under short names, and ``gain``: its primary score minus the untrained
    student's (negative: a failed run)."""
    scores = {name: summary[key] for name, key in SCORE_COLUMNS.items() if summary.get(key) is not None}
    untrained = (summary.get("models") or {}).get(UNTRAINED_LABEL) or {}
    if "primary" in scores and untrained.get("primary_score") is not None:
        scores["gain"] = clean_number(scores["primary"] - untrained["primary_score"])
    return scores


def write_summary(
    all_results: Mapping[str, Mapping[str, Any]],
    primary_label: str,
    languages: list[str],
    metrics_dir: Path,
    reports_dir: Path,
    protocol: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``summary.json`` (the primary model's scores at top level, every model under ``models``, and the
    ``protocol`` they were measured under when given) and ``summary.md``."""
    primary = all_results[primary_label]
    models = {label: headline(r) for label, r in all_results.items()}
    summary = {
        **models[primary_label],
        "per_language": per_language_scores(primary, languages),
        "models": {
            label: {**values, "per_language": per_language_scores(all_results[label], languages)}
            for label, values in models.items()
        },
        **({"protocol": dict(protocol)} if protocol is not None else {}),
    }
    write_json_atomic(metrics_dir / "summary.json", summary)
    rows = list(dict.fromkeys(k for values in models.values() for k in values))
    per_language_rows = {
        label: {f"per_language.{k}": v for k, v in m["per_language"].items()} for label, m in summary["models"].items()
    }
    columns = {label: {**models[label], **per_language_rows[label]} for label in models}
    rows += list(dict.fromkeys(k for values in per_language_rows.values() for k in values))
    specs = "\n".join(
        f"- **{label}**: `{r.get('spec')}` ({r.get('dimension')}-d, {r.get('seconds')} s, "
        f"{r.get('sentences_encoded')} sentences encoded"
        + (f", {r['sentences_reused']} derived from stored encodings)" if r.get("sentences_reused") else ")")
        for label, r in all_results.items()
    )
    text = (
        f"# Evaluation summary\n\nModels:\n{specs}\n\n{markdown_table(rows, columns)}\n"
        f"- {PRIMARY_SCORE_DEFINITION}\n- {PER_LANGUAGE_DEFINITION}\n- {TRACK_4B_NOTE}\n- {TR_EN_ALIGNMENT}\n"
        "- Per-benchmark tables: the other files in this folder.\n"
    )
    write_text_atomic(reports_dir / "summary.md", text)
    return summary
