"""Reading the quality run's exported results: each member's files, the tatoeba-all scores, the embedded default."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from bench.quality.results import TATOEBA_ALL


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
        "eval": {
            p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted((folder / "metrics/eval").glob("*.json"))
        },
    }


def load_tatoeba_all(results: Path) -> dict[str, dict[str, Any]]:
    """``{model key: result}`` written by ``python -m bench.quality tatoeba-all`` (empty before it ran)."""
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted((results / TATOEBA_ALL).glob("*.json"))}


def winner(
    config: Mapping[str, Any], results: Path, key: str = "ablation_winner"
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The ablation variant named by ``key`` (``ablation_winner``: the recipe the embedded default uses), when it
    ran."""
    name = config.get(key)
    spec = next((v for v in config.get("ablation", []) if v["name"] == name), None)
    if spec is None or not (results / name / "run.json").is_file():
        return []
    return [
        (
            {**spec, "label": f"{spec['name']} (the embedded default's recipe, at its scale)"},
            load_member(results / name),
        )
    ]


def embedded_default(project: Path | None) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The project's own student (params.yaml's recipe, its committed `dvc repro` metrics), when it has them."""
    if project is None or not (project / "metrics" / "eval" / "summary.json").is_file():
        return []
    label = "the embedded default (params.yaml; the evaluate stage's metrics/eval of this commit's `dvc repro`)"
    return [({"name": "embedded-default", "label": label}, load_member(project))]
