"""The quality run's configuration: bench/quality/quality.yaml's members, ablation variants and light students."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

CONFIG = Path(__file__).resolve().parent / "quality.yaml"


def load_config(path: Path) -> dict[str, Any]:
    config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    config.setdefault("ablation", [])
    config.setdefault("light", [])
    names = [m.get("name") for m in config.get("members", []) + config["ablation"] + config["light"]]
    if not config.get("members") or None in names or len(set(names)) != len(names):
        raise SystemExit(f"{path}: every member and ablation variant needs a unique name")
    return config


def runs(config: dict[str, Any]) -> list[dict[str, Any]]:
    """Every runnable entry: the ablation variants, the light students, then the members."""
    return list(config["ablation"]) + list(config["light"]) + list(config["members"])


def member_overrides(config: dict[str, Any], member: dict[str, Any]) -> dict[str, Any]:
    """The member's ``-S`` overrides on top of the shared ones (``ablation_common`` for a variant)."""
    shared = "ablation_common" if is_ablation(config, member) and "ablation_common" in config else "common"
    return {**(config.get(shared) or {}), **(member.get("overrides") or {})}


def is_ablation(config: dict[str, Any], member: dict[str, Any]) -> bool:
    """Ablation variants and light students run at the ablation's scale (``ablation_common``)."""
    return any(member["name"] == variant["name"] for variant in config.get("ablation", []) + config.get("light", []))
