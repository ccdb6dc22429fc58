"""The quality run (``python -m bench.quality``) runs end to end at a tiny size: a member through the distill flow,
exported, reported."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.markdown import markdown_table_after
from testbed.pipeline_project import make_pipeline_project, pipeline_env

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_quality_run_tiny_member_registers_exports_and_reports(tmp_path: Path, mirror_dir: Path) -> None:
    project = make_pipeline_project(tmp_path / "project", mirror_dir)
    config = tmp_path / "quality.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "common": {"train.steps": 4},
                "members": [
                    {
                        "name": "tiny-minilm",
                        "label": "tiny student <- MiniLM",
                        "overrides": {"models.teacher": "pypi:all-minilm-l6-v2"},
                    },
                    {"name": "never-run", "label": "not run"},
                ],
                "ablation": [
                    {"name": "tiny-ablation", "label": "tiny variant", "overrides": {"train.learning_rate": 1.0e-5}}
                ],
            }
        ),
        encoding="utf-8",
    )
    results, output = tmp_path / "results", tmp_path / "RESULTS.md"
    env = {
        **pipeline_env(),
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.quality",
            "run",
            "--members",
            "tiny-minilm",
            "tiny-ablation",
            "--config",
            str(config),
            "--project",
            str(project),
            "--results",
            str(results),
            "--output",
            str(output),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]

    member = results / "tiny-minilm"
    run_info = json.loads((member / "run.json").read_text())
    # the gate judged it (a 4-step student of 2 layers may be refused against the untrained student; the reason is kept)
    promotion = run_info["flow_result"]["promotion"]
    assert promotion["decision"] in ("promoted", "refused") and promotion["reasons"]
    assert run_info["student"]["dimension"] == 384 and run_info["student"]["sentences_per_second"] > 0
    assert yaml.safe_load((member / "params.yaml").read_text())["train"]["steps"] == 4
    summary = json.loads((member / "metrics/eval/summary.json").read_text())
    assert set(summary["models"]) == {"student", "student-start", "student-untrained", "teacher"}
    # the experiment is in the project, its params as run; the project's own params untouched
    refs = subprocess.run(
        ["git", "for-each-ref", "--format=%(refname)", "refs/exps"],
        cwd=project,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert run_info["experiment"] in refs
    assert yaml.safe_load((project / "params.yaml").read_text())["train"]["steps"] == 6
    assert not list(project.parent.glob(f".{project.name}-exp-*"))  # workspace removed

    report = output.read_text()
    assert "## STS17" in report and "mUSE (R&G 2020, T1/T2)" in report and "Members not run yet: never-run" in report
    table = markdown_table_after(report, "## Every student")
    assert float(table["Tatoeba average (training languages)"]["`tiny-minilm`"]) == pytest.approx(
        summary["tatoeba_average"], abs=0.05
    )
    primary = table["primary score (mean of the STS, retrieval and mining task scores)"]
    assert float(primary["`tiny-minilm`"]) == pytest.approx(summary["primary_score"], abs=0.05)
    assert primary["teacher MiniLM-L6 (English)"] == "-"  # English-only: scored on the English sets alone
    # the ablation table has the references and the variant, with the dev numbers that chose it
    ablation = report[report.index("## Ablation") :]
    assert "mE5-small, untrained" in ablation and "(`tiny-ablation`)" in ablation and "learning_rate=1e-05" in ablation
    assert "## Targets" in report and "targets met" in report
    # report alone rebuilds the same file from the exports (and the same project's own metrics: none here)
    assert "the embedded default" not in report
    os.remove(output)
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.quality",
            "report",
            "--config",
            str(config),
            "--results",
            str(results),
            "--output",
            str(output),
            "--project",
            str(project),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert output.read_text() == report
    check_light_section(config, results, tmp_path / "light", env)

    # tatoeba-all: the registered student (from the MLflow store) and the untrained one on chosen languages,
    # as many pairs as the pipeline's own Tatoeba evaluation (tiny params: 40)
    codes = ["deu", "spa", "fra"]

    def tatoeba_all() -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.quality",
                "tatoeba-all",
                "--config",
                str(config),
                "--project",
                str(project),
                "--results",
                str(results),
                "--output",
                str(output),
                "--mirror",
                str(mirror_dir),
                "--codes",
                *codes,
                "--max-pairs",
                "40",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )

    scored = tatoeba_all()
    assert scored.returncode == 0, scored.stdout[-3000:] + scored.stderr[-5000:]
    tatoeba = {p.stem: json.loads(p.read_text()) for p in (results / "tatoeba_all").glob("*.json")}
    assert set(tatoeba) == {"tiny-minilm", "student-untrained"}
    for result in tatoeba.values():
        assert result["languages"] == codes and set(result["scores"]) == set(codes)
        assert all(r["n"] == 40 for r in result["scores"].values())
    # the model loaded from the registry scores what the pipeline measured on its training languages
    # (one neighbour of 40 may flip with batch composition: 1.25 points)
    pipeline_scores = json.loads((member / "metrics/eval/tatoeba.json").read_text())
    for key, label in [("tiny-minilm", "student"), ("student-untrained", "student-untrained")]:
        for code in ("deu", "spa"):
            assert tatoeba[key]["scores"][code]["average"] == pytest.approx(pipeline_scores[label][code], abs=1.3)
    table = markdown_table_after(output.read_text(), "## Tatoeba, all languages")
    assert float(table["average, all 3 languages"]["tiny student <- MiniLM"]) == pytest.approx(
        tatoeba["tiny-minilm"]["average"], abs=0.05
    )
    assert float(table["average, the other languages"]["tiny student <- MiniLM"]) == pytest.approx(
        tatoeba["tiny-minilm"]["scores"]["fra"]["average"], abs=0.05
    )
    assert (results / "tatoeba_all.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # the per-language plot,
    assert "](results/tatoeba_all.png)" in output.read_text()  # linked from RESULTS.md
    rerun = tatoeba_all()  # resumable: models already scored on these languages are skipped
    assert rerun.returncode == 0 and rerun.stdout.count("already scored") == 2, rerun.stdout + rerun.stderr[-2000:]


def check_light_section(config: Path, results: Path, folder: Path, env: dict[str, str]) -> None:
    """A light student is reported beside the full student of its recipe (``ablation_winner``) with the
    share of its quality it keeps; the exports are reused (report only), so the share is 100 %."""
    shutil.copytree(results, folder / "results")
    shutil.copytree(results / "tiny-ablation", folder / "results" / "tiny-light")
    light_config = folder / "quality.yaml"
    light_config.write_text(
        yaml.safe_dump(
            {
                **yaml.safe_load(config.read_text()),
                "ablation_winner": "tiny-ablation",
                "light": [{"name": "tiny-light", "label": "tiny light", "overrides": {"train.student.keep_layers": 1}}],
            }
        ),
        encoding="utf-8",
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.quality",
            "report",
            "--config",
            str(light_config),
            "--results",
            str(folder / "results"),
            "--output",
            str(folder / "RESULTS.md"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = markdown_table_after((folder / "RESULTS.md").read_text(), "## Light students")
    light, full = (
        rows["tiny light (`tiny-light`)"],
        rows["full student (the default recipe when the light rows ran) (`tiny-ablation`)"],
    )
    assert light["% of full STS17"] == light["% of full Tatoeba"] == "100.0"
    assert "keep_layers=1" in light["changed (`-S` over the default)"] and full["speed x"] == "1.00"
    student = json.loads((results / "tiny-ablation" / "run.json").read_text())["student"]
    assert light["parameters"] == f"{student['parameters'] / 1e6:.1f}M"
