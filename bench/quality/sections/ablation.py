"""RESULTS.md's ablation table: one row per variant, its dev numbers (which chose it), its evaluation, its cost."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.quality.columns import cell, student_summary, wall_time_cell
from bench.quality.load import load_member

ABLATION_DEV = [
    ("dev_score", "dev score"),
    ("dev_sts", "dev STS"),
    ("dev_accuracy", "dev retrieval"),
    ("dev_teacher_accuracy", "dev teacher-space"),
    ("dev_mining_f1", "dev mining"),
]


ABLATION_EVAL = [
    ("primary_score", "primary"),
    ("sts17_average", "STS17"),
    ("sts17_monolingual_average", "STS17 mono"),
    ("sts17_crosslingual_average", "STS17 cross"),
    ("sts_monolingual_average", "STSb mono"),
    ("sts_crosslingual_average", "STSb cross"),
    ("tatoeba_average", "Tatoeba"),
    ("mining_flores_f1", "mining F1"),
    ("teacher_space_flores_accuracy", "teacher-space FLORES"),
    ("teacher_space_flores_min", "worst lang."),
    ("teacher_space_adapter_flores_accuracy", "adapter FLORES"),
    ("teacher_space_adapter_flores_min", "adapter worst"),
]


def _ablation_scale(config: Mapping[str, Any], first: Mapping[str, Any]) -> str:
    """In words: the settings every variant shares (read from the first variant's own params.yaml)."""
    params = first.get("params") or {}
    train = params.get("train") or {}
    teacher = (params.get("models") or {}).get("teacher", "?")
    scale = (
        f"{', '.join(params.get('languages') or [])}; teacher `{teacher}`; "
        f"{train.get('steps', '?')} steps x {train.get('batch_size', '?')} pairs"
    )
    if "ablation_common" in config:
        shared = config.get("ablation_common") or {}
        where = "the embedded default (params.yaml)" + (f" with `{json.dumps(shared)}`" if shared else "")
    else:
        where = "the common settings below"
    return f"{where} ({scale})"


def _head_fit(member: Mapping[str, Any]) -> str:
    student = ((member.get("params") or {}).get("train") or {}).get("student") or {}
    return {"procrustes": "Procrustes", "least_squares": "least-squares", "pca": "PCA"}.get(
        student.get("head_fit"), "fitted"
    )


def ablation_section(config: Mapping[str, Any], results: Path) -> str:
    """One row per ablation variant: what changed, its dev numbers (which chose it), its evaluation, its cost."""
    variants = [
        (spec, load_member(results / spec["name"]))
        for spec in config.get("ablation", [])
        if (results / spec["name"] / "run.json").is_file()
    ]
    if not variants:
        return ""
    headers = [
        "variant",
        "changed (`-S` over the common settings)",
        "dev score at its start",
        *[t for _, t in ABLATION_DEV],
        *[t for _, t in ABLATION_EVAL],
        "worst lang. at its start",
        "wall",
        "gate",
    ]
    lines = [
        "## Ablation: the recipe, one lever at a time",
        "",
        "Each row is one `distill` flow run (`python -m bench.quality run --members NAME`) with "
        + _ablation_scale(config, variants[0][1])
        + ". The dev columns are the trainer's development "
        "measurements of the exported student (what chose checkpoints and the WiSE-FT weight; metrics/train.json); "
        "the other columns are the evaluate stage's numbers on the evaluation sets, which only report. "
        "The first row is the untrained student; the second the start of the first variant (its head fitted, "
        "no training). A variant's head fit and sample make its own start: its dev score and teacher-space "
        "worst language before training are in the 'at its start' columns, so a gain is read against them.",
        "",
        "| " + " | ".join(headers) + " |",
        "|---|---|" + "---:|" * (len(headers) - 2),
    ]
    first = variants[0][1]
    models = (first["eval"].get("summary") or {}).get("models", {})
    references = [
        ("mE5-small, untrained", "student-untrained", None),
        (
            f"mE5-small + {_head_fit(first)} head, no training (student-start of `{variants[0][0]['name']}`)",
            "student-start",
            first["train"]["start"],
        ),
    ]
    for title, label, dev in references:
        values = models.get(label, {})
        lines.append(
            f"| {title} | - | - | "
            + " | ".join(cell((dev or {}).get(k), 2) for k, _ in ABLATION_DEV)
            + " | "
            + " | ".join(cell(values.get(k)) for k, _ in ABLATION_EVAL)
            + " | - | - | - |"
        )
    for spec, data in variants:
        run, train = data["run"] or {}, data["train"] or {}
        exported = train.get("exported") or train.get("best") or {}
        student = student_summary(data)
        changed = ", ".join(f"`{k}={json.dumps(v)}`" for k, v in (spec.get("overrides") or {}).items()) or "(none)"
        interpolation = train.get("interpolation")
        if interpolation:
            changed += f"; WiSE-FT chose a={interpolation['alpha']:g}"
        decision = ((run.get("flow_result") or {}).get("promotion") or {}).get("decision", "-")
        start = ((data["eval"].get("summary") or {}).get("models") or {}).get("student-start") or {}
        lines.append(
            f"| {spec.get('label', spec['name'])} (`{spec['name']}`) | {changed} "
            f"| {cell((train.get('start') or {}).get('dev_score'), 2)} | "
            + " | ".join(cell(exported.get(k), 2) for k, _ in ABLATION_DEV)
            + " | "
            + " | ".join(cell(student.get(k)) for k, _ in ABLATION_EVAL)
            + f" | {cell(start.get('teacher_space_flores_min'))} | {wall_time_cell(data)} | {decision} |"
        )
    lines += [
        "",
        "Command of each row: `python -m bench.quality run --members <name>` (the name in brackets). "
        "`a` = the WiSE-FT weight the trainer chose on dev data (0 = the starting student, 1 = the best "
        "checkpoint).",
        stsb_noise_note(
            results.parent / "diagnostics" / "stsb_sample_size.json",
            (first["params"].get("evaluate") or {}).get("stsb_max_pairs"),
        ),
        "",
    ]
    return "\n".join(lines) + "\n"


def stsb_noise_note(probe: Path, pairs: int | None) -> str:
    """How far a row's STSb columns must sit from the untrained student's to mean anything, at the rows' STSb size
    (``evaluate.stsb_max_pairs``), from bench/probes/stsb_sample_size.py's intervals; "" when it has none."""
    found = json.loads(probe.read_text()) if probe.is_file() else {"sizes": {}}
    if pairs is None or str(pairs) not in found["sizes"] or "all" not in found["sizes"]:
        return ""
    sample, full = (found["sizes"][size]["monolingual"]["average"] for size in (str(pairs), "all"))
    return (
        f"The STSb columns score {pairs} pairs a set. On the embedded default, the paired-bootstrap 95 % interval "
        f"of the student's monolingual STSb minus the untrained student's is {sample['difference']:+.2f} "
        f"{sample['ci95']} at "
        f"that size and {full['difference']:+.2f} {full['ci95']} on every pair (`{found['command']}`): a row "
        "within that interval's half-width of the untrained student on STSb is not told apart from it."
    )
