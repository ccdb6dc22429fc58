"""RESULTS.md's trained end on dev data: each member's start, best checkpoint and last step (metrics/train.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.paths import RESULTS_DIR
from bench.quality.columns import cell

TRAJECTORY = [
    ("dev_score", "dev score"),
    ("dev_sts_en-en", "dev STS en-en"),
    ("dev_sts_monolingual", "dev STS mono"),
    ("dev_sts_crosslingual", "dev STS cross"),
    ("dev_mse_x100", "dev MSE x100"),
    ("dev_teacher_accuracy", "dev teacher-space"),
]


def english_sts_note(probe: Path) -> str:
    """The English STS of the teacher and the untrained student on dev and test (bench/probes/english_sts.py), when
    that probe ran: the reference for the dev STS en-en column."""
    if not probe.is_file():
        return ""
    models = json.loads(probe.read_text())["models"]
    parts = [
        f"{name} {m['stsb-multi-mt dev en-en']:.1f} dev / {m['STS17 en-en']:.1f} STS17"
        for name, m in models.items()
        if name in ("teacher-mpnet", "untrained")
    ]
    return (
        " English STS on every pair (stsb-multi-mt dev en-en / STS17 en-en; `python -m bench.probes.english_sts`): "
        + ", ".join(parts)
        + "."
    )


def trajectory_section(members: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    """Where each member's trained end sits on dev data: the start, the best checkpoint (a = 1) and the last step,
    then the exported WiSE-FT student; read from metrics/train.json, the numbers that chose the export."""
    rows = []
    for spec, data in members:
        train = data.get("train") or {}
        if not (train.get("start") and train.get("best") and train.get("last")):
            continue
        interpolation = train.get("interpolation") or {}
        exported = train.get("exported") or {}
        cells = [
            f"{spec['name']}",
            str((data["params"].get("train") or {}).get("learning_rate", "-")),
            f"{train.get('best_step', '-')} / {train.get('steps', '-')}",
        ]
        for key, _ in TRAJECTORY:
            digits = 4 if key == "dev_mse_x100" else 1
            cells.append(" -> ".join(cell(train[k].get(key), digits) for k in ("start", "best", "last")))
        cells.append(f"a={interpolation.get('alpha', '-')}: {cell(exported.get('dev_score'), 2)}")
        rows.append("| " + " | ".join(cells) + " |")
    if not rows:
        return ""
    english = english_sts_note(RESULTS_DIR / "diagnostics" / "english_sts.json")
    headers = [
        "member",
        "lr",
        "best step / steps",
        *[f"{t}: start -> best -> last" for _, t in TRAJECTORY],
        "exported (WiSE-FT a: dev score)",
    ]
    return (
        "\n".join(
            [
                "## The trained end on dev data",
                "",
                "Each member's dev measurements (metrics/train.json; the stsb-multi-mt dev split and held-out pairs, "
                "never an evaluation set) at its start (the untrained student with its head fitted), at its best "
                "checkpoint before interpolation (a = 1) and at its last step. Read with the targets above: a student "
                "reaches the teacher's English quality only where its trained end does, and the export is a WiSE-FT "
                "mix of that end and the start." + english,
                "",
                "| " + " | ".join(headers) + " |",
                "|---|---:|---:|" + "---|" * len(TRAJECTORY) + "---:|",
                *rows,
                "",
            ]
        )
        + "\n"
    )
