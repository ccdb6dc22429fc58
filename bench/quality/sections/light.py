"""RESULTS.md's light students table: size, speed and the share of the full student's quality they keep."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.quality.columns import cell, student_summary, wall_time_cell
from bench.quality.load import load_member, winner
from bench.quality.targets import LIGHT_KEEP_TARGET, LIGHT_QUALITY, light_targets


def light_section(config: Mapping[str, Any], results: Path) -> str:
    """The light students (vocabulary trimming, fewer layers, a low-dimensional head) beside the full
    student of the same scale (``light_reference``, else ``ablation_winner``): size, speed and the share of its
    quality they keep."""
    variants = [
        (spec, load_member(results / spec["name"]))
        for spec in config.get("light", [])
        if (results / spec["name"] / "run.json").is_file()
    ]
    full = winner(config, results, key="light_reference" if "light_reference" in config else "ablation_winner")
    if not variants or not full:
        return ""
    full_spec, full_data = full[0]
    full_student = student_summary(full_data)
    full_speed = (full_data["run"].get("student") or {}).get("sentences_per_second")
    headers = [
        "student",
        "changed (`-S` over the default)",
        "dim",
        "parameters",
        "size MB",
        "sentences/s",
        "speed x",
        *[t for _, t in LIGHT_QUALITY],
        *[f"% of full {t}" for _, t in LIGHT_QUALITY],
        "primary",
        "targets",
        "wall",
        "gate",
    ]
    lines = [
        "## Light students: size, speed and the quality they keep",
        "",
        "Each row is one `distill` flow run at the ablation's scale (`python -m bench.quality run --members NAME`), "
        f"compared with the full student of the same recipe and scale (`{full_spec['name']}`). "
        f"Targets: <= 50M parameters and <= 100 MB on disk keeping >= {LIGHT_KEEP_TARGET:.0f} % of the full "
        "student's STS17 and Tatoeba averages; the 128-d student faster than the 384-d one. Size: the exported "
        "fp32 folder (`xdistill export` writes fp16 and int8 copies: BENCHMARKS.md). Speed: "
        "`SentenceTransformer.encode` of 512 FLORES English sentences on the 2-core CPU, measured at the end of each "
        "run, so rows run on different days differ by the machine's speed of that day as well (up to 1.6x was seen "
        "on the same code); the side-by-side measurement of a light student against the full one in one process is "
        "`python -m bench.perf.export --light LABEL=FOLDER` (BENCHMARKS.md).",
        "",
        "| " + " | ".join(headers) + " |",
        "|---|---|" + "---:|" * (len(headers) - 3) + "---|",
    ]
    rows = [
        ({"name": full_spec["name"], "label": "full student (the default recipe when the light rows ran)"}, full_data),
        *variants,
    ]
    all_facts = [(data["run"] or {}).get("student") or {} for _, data in variants]
    for index, (spec, data) in enumerate(rows):
        run, student = data["run"] or {}, student_summary(data)
        facts = run.get("student") or {}
        speed = facts.get("sentences_per_second")
        kept = [
            100.0 * student[k] / full_student[k] if student.get(k) and full_student.get(k) else None
            for k, _ in LIGHT_QUALITY
        ]
        targets = "-" if index == 0 else light_targets(facts, kept, all_facts)
        changed = ", ".join(f"`{k}={json.dumps(v)}`" for k, v in (spec.get("overrides") or {}).items()) or "-"
        decision = ((run.get("flow_result") or {}).get("promotion") or {}).get("decision", "-")
        lines.append(
            f"| {spec.get('label', spec['name'])} (`{spec['name']}`) | {changed} | {facts.get('dimension', '-')} "
            f"| {facts.get('parameters', 0) / 1e6:.1f}M | {facts.get('size_mb', '-')} | {cell(speed)} "
            f"| {cell(speed / full_speed if speed and full_speed else None, 2)} | "
            + " | ".join(cell(student.get(k)) for k, _ in LIGHT_QUALITY)
            + " | "
            + " | ".join(cell(value) for value in kept)
            + f" | {cell(student.get('primary_score'))} | {targets} | {wall_time_cell(data)} | {decision} |"
        )
    lines += [
        "",
        "'targets': the quality targets this row misses (computed from the columns); a low-dimensional row "
        "is compared for speed with the 384-d light rows of its size (parameters within 5 %).",
        "",
    ]
    return "\n".join(lines) + "\n"
