"""The quality run's results folder (bench/results/quality/): where each member's export goes, and how it is written.

After each member, its experiment's params and metrics are copied into ``<results>/<member>/`` (with the
run's facts in ``run.json``), so the report can rebuild RESULTS.md from committed files at any time;
``tatoeba-all`` writes one JSON per model into ``<results>/tatoeba_all/``.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from bench.paths import RESULTS_DIR

RESULTS = RESULTS_DIR / "quality"
TATOEBA_ALL = "tatoeba_all"
# What the report needs from each experiment commit.
EXPORTED_FILES = ["params.yaml", "metrics/train.json", "metrics/data_report.json", "metrics/register.json"]
EXPORTED_DIRS = ["metrics/eval"]


def export_experiment(workspace: Path, out: Path) -> None:
    """Copy the member's params and metrics into ``out`` (replacing an older export whole)."""
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    for name in EXPORTED_FILES:
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(workspace / name, tmp / name)
    for name in EXPORTED_DIRS:
        shutil.copytree(workspace / name, tmp / name)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)
