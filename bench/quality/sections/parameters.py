"""RESULTS.md's parameters section: the shared overrides and each member's own, experiment and MLflow version."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import yaml


def params_section(config: Mapping[str, Any], members: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    lines = [
        "## Parameters",
        "",
        "Shared `-S` overrides of `params.yaml` (bench/quality/quality.yaml):",
        "",
        "```yaml",
        yaml.safe_dump(config.get("common") or {}, sort_keys=False).rstrip(),
        "```",
        "",
    ]
    for spec, data in members:
        run = data["run"] or {}
        lines += [
            f"- **{spec.get('label', spec['name'])}**: `{json.dumps(spec.get('overrides') or {})}`; DVC experiment "
            f"`{run.get('experiment', '-')}` (`dvc exp apply {run.get('experiment', '-')}`), MLflow model "
            f"version {(run.get('flow_result') or {}).get('model_version', '-')} of MLflow run "
            f"`{(run.get('flow_result') or {}).get('mlflow_run_id', '-')}` (versions restart in a new store); loss "
            f"`{json.dumps(data['params']['train'].get('loss', {}))}`."
        ]
    return "\n".join(lines) + "\n\n"
