"""dvc.yaml's training-curve plots read the history the train stage writes (`dvc plots show`)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HISTORY = ROOT / "reports" / "train_history.csv"


def test_dvc_plots_show_the_training_curves_from_the_history(tmp_path: Path) -> None:
    shown = subprocess.run(  # -o: dvc writes the rendered plots there, not into the repository
        [sys.executable, "-m", "dvc", "plots", "show", "--json", "-o", str(tmp_path / "plots")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    plots = json.loads(shown.stdout)["data"]
    with HISTORY.open(encoding="utf-8", newline="") as handle:
        history = list(csv.DictReader(handle))
    for plot, columns in (("dev score while training", ["dev_score", "dev_sts"]), ("training loss", ["loss"])):
        values = plots[plot][0]["content"]["data"]["values"]
        for column in columns:
            # one curve per column; its points are the steps that logged it, each value as the history holds it
            expected = [(row["step"], row[column]) for row in history if row[column]]
            shown_points = [
                (value["step"], value.get("dvc_inferred_y_value", value[column]))
                for value in values
                if value.get("field", column) == column and value.get("dvc_inferred_y_value", value[column])
            ]
            assert len(expected) >= 2 and shown_points == expected, (plot, column)
