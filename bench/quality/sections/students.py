"""RESULTS.md's students table: training, what dev data chose, size, speed, wall time and the gate's decision."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.quality.columns import short_model, wall_time_cell


def students_section(members: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    lines = [
        "## The students: training, size and speed",
        "",
        "| student | teacher | steps x batch | train pairs | dev score start -> exported | dev MSE start -> exported "
        "| chosen on dev | dim | parameters | size MB | sentences/s (CPU) | index MB / 1M sentences | run wall time "
        "| promotion |",
        "|---|---|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for spec, data in members:
        run, train, params = data["run"] or {}, data["train"] or {}, data["params"]
        student = run.get("student", {})
        promotion = (run.get("flow_result") or {}).get("promotion") or {}
        start, exported = train.get("start", {}), train.get("exported") or train.get("best", {})
        lines.append(
            f"| {spec.get('label', spec['name'])} | {short_model(params['models']['teacher'])} "
            f"| {params['train']['steps']} x {params['train']['batch_size']} "
            f"| {(data['data'] or {}).get('totals', {}).get('train', '-')} "
            f"| {start.get('dev_score', float('nan')):.2f} -> {exported.get('dev_score', float('nan')):.2f} "
            f"| {start.get('dev_mse_x100', float('nan')):.4f} -> {exported.get('dev_mse_x100', float('nan')):.4f} "
            f"| {_chosen(train)} "
            f"| {student.get('dimension', '-')} | {student.get('parameters', 0) / 1e6:.1f}M "
            f"| {student.get('size_mb', '-')} "
            f"| {student.get('sentences_per_second', '-')} | {student.get('index_mb_per_million', '-')} "
            f"| {wall_time_cell(data)} | {promotion.get('decision', '-')} |"
        )
    lines += [
        "",
        "Dev score and MSE are the trainer's measurements on development data (xdistill.training.validation: "
        "stsb-multi-mt dev split, held-out pairs; MSE x 100, through the projection for a low-dimensional "
        "student); 'exported' is the student the trainer chose on them (best checkpoint, then the WiSE-FT "
        "weight). 'chosen on dev': the best checkpoint's step, the WiSE-FT weight a and the dev score's "
        "mining part, start -> exported (news blocks: `parallel.dev_mining_block`; pooled: the held-out pairs). "
        "Speed: `SentenceTransformer.encode` of 512 FLORES English sentences on the 2-core CPU; index "
        "size: float32 vectors.",
        "",
    ]
    return "\n".join(lines) + "\n"


def _chosen(train: Mapping[str, Any]) -> str:
    """Best step, WiSE-FT weight and the dev mining the dev score used, start -> exported."""
    if not train:
        return "-"
    interpolation = train.get("interpolation") or {}
    start, exported = train.get("start", {}), train.get("exported") or train.get("best", {})
    key, kind = (
        ("dev_block_mining_f1", "news blocks") if "dev_block_mining_f1" in start else ("dev_mining_f1", "pooled")
    )
    a = f", a={interpolation['alpha']:g}" if interpolation else ""
    return (
        f"step {train.get('best_step', '-')}{a}; {kind} mining {start.get(key, float('nan')):.1f} -> "
        f"{exported.get(key, float('nan')):.1f}"
    )
