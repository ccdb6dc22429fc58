"""bench/quality.py runs end to end at a tiny size: a member through the distill flow, exported, reported."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline_project import make_pipeline_project, pipeline_env

ROOT = Path(__file__).resolve().parent.parent


def markdown_table_after(text: str, heading: str) -> dict[str, dict[str, str]]:
    """``{row: {column: cell}}`` of the first Markdown table after ``heading``."""
    after = text.split(heading, 1)[1].splitlines()
    start = next(i for i, line in enumerate(after) if line.startswith("|"))
    end = next((i for i in range(start, len(after)) if not after[i].startswith("|")), len(after))
    lines = after[start:end]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0]] = dict(zip(header[1:], cells[1:], strict=True))
    return rows


def bench_module(name: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``bench/<name>.py`` loaded by path; the bench scripts put bench/ on sys.path (its report.py and
    common.py would shadow other modules of those names), so sys.path is restored after the test."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_wall_time_cell_flags_a_run_resumed_from_checkpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    """A resumed flow skipped the interrupted run's steps: its row must say so and give the trainer's own
    training time (carried by the checkpoints), not only the shorter wall time of the resumed flow."""
    wall_time_cell = bench_module("quality_report", monkeypatch).wall_time_cell

    fresh = {"run": {"wall_seconds": 5400}, "train": {"resumed_from_step": None, "train_seconds": 2700}}
    resumed = {"run": {"wall_seconds": 1800}, "train": {"resumed_from_step": 1200, "train_seconds": 3180}}
    assert wall_time_cell(fresh) == "90 min"
    assert wall_time_cell(resumed) == "30 min (resumed at step 1200; training 53 min in all)"
    # the flow's record of its stages: what ran (minutes) and what came from DVC's caches
    stages = {"teacher_embed": {"ran": True, "seconds": 20.0}, "train": {"ran": True, "seconds": 2880.0},
              "start_adapter": {"ran": False, "seconds": 3.1}, "baselines": {"ran": False, "seconds": 4.0},
              "evaluate": {"ran": True, "seconds": 840.0}}
    recorded = {"run": {"wall_seconds": 3900, "flow_result": {"stages": stages}}, "train": fresh["train"]}
    assert wall_time_cell(recorded) == ("65 min (ran teacher_embed 0, train 48, evaluate 14 min; "
                                        "cached start_adapter, baselines)")


def test_a_member_resumes_from_the_newest_workspace_its_killed_runs_left(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    quality = bench_module("quality", monkeypatch)
    project = tmp_path / "main"
    project.mkdir()
    for name in ("q-20261126-2200", "q-20261127-0502", "q-1200-20261127-0600", "q-20261127-0700"):
        workspace = tmp_path / f".main-exp-{name}"
        (workspace / "data" / "checkpoints").mkdir(parents=True)
        if name != "q-20261127-0700":  # killed before its first checkpoint: nothing to resume
            (workspace / "data" / "checkpoints" / "last.pt").write_bytes(b"x")
    found = quality.interrupted_workspaces(project, "q")
    # another member whose name extends this one ("q-1200") is never picked up
    assert [w.name for w in found] == [".main-exp-q-20261126-2200", ".main-exp-q-20261127-0502"]


def test_the_ablation_notes_the_stsb_interval_at_the_rows_size(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    report = bench_module("quality_report", monkeypatch)
    probe = tmp_path / "stsb_sample_size.json"
    average = {"monolingual": {"average": {"difference": -0.27, "ci95": [-1.89, 1.16]}}}
    probe.write_text(json.dumps({"command": "python bench/stsb_sample_size_probe.py ...", "sizes": {
        "100": average, "all": {"monolingual": {"average": {"difference": 0.14, "ci95": [-0.18, 0.48]}}}}}))
    note = report.stsb_noise_note(probe, 100)
    assert "score 100 pairs" in note and "-0.27 [-1.89, 1.16]" in note and "+0.14 [-0.18, 0.48]" in note
    # rows scored on every pair, or at a size the probe did not measure, or no probe: no note
    assert report.stsb_noise_note(probe, None) == report.stsb_noise_note(probe, 300) == ""
    assert report.stsb_noise_note(tmp_path / "absent.json", 100) == ""


def test_the_adapter_sweep_section_names_the_student_and_the_dev_choice(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    report = bench_module("quality_report", monkeypatch)
    diagnostics, results = tmp_path / "diagnostics", tmp_path / "quality"
    diagnostics.mkdir()
    (results / "member-a").mkdir(parents=True)
    (results / "member-a" / "run.json").write_text(json.dumps({"flow_result": {"experiment_rev": "abc123"}}))
    assert report.adapter_sweep_section(diagnostics, results) == ""

    def variant(steps: int, batch: int | None, dev_min: float, flores_min: float) -> dict[str, Any]:
        return {"overrides": {"batch_pairs": batch} if batch else {}, "fit_seconds": 10, "steps": steps,
                "dev": {"min": dev_min, "average": 95.0}, "flores": {"min": flores_min, "average": 94.0}}

    (diagnostics / "teacher_adapter_sweep.json").write_text(json.dumps({
        "command": "python bench/teacher_adapter_sweep.py WS OUT 100 b2:batch_pairs=2", "seconds": 600,
        "teacher": "pypi:all-mpnet-base-v2", "student_commit": "abc123", "fit_pairs": 100, "chosen_on_dev": "b2",
        "variants": {"default": variant(50, None, 86.5, 89.8), "b2": variant(25, 2, 88.0, 91.5)}}))
    section = report.adapter_sweep_section(diagnostics, results)
    assert "`member-a`" in section and "100 training pairs" in section
    rows = markdown_table_after(section, "## Teacher-space adapter settings")
    assert rows["1: default"]["changed (train.teacher_adapter)"] == "the defaults" and rows["1: default"]["on dev"] == ""
    assert rows["1: b2"]["changed (train.teacher_adapter)"] == "batch_pairs=2"
    assert rows["1: b2"]["dev worst"] == "88.0" and rows["1: b2"]["on dev"] == "chosen"
    assert "Sweep 1: `python bench/teacher_adapter_sweep.py WS OUT 100 b2:batch_pairs=2` (10 min)." in section


def test_light_rows_say_which_targets_they_miss(monkeypatch: pytest.MonkeyPatch) -> None:
    light_targets = bench_module("quality_report", monkeypatch).light_targets
    wide = {"dimension": 384, "parameters": 26.6e6, "size_mb": 104.5, "sentences_per_second": 231.7}
    narrow = {"dimension": 128, "parameters": 26.6e6, "size_mb": 99.0, "sentences_per_second": 226.9}
    assert light_targets(narrow, [98.0, 99.0], [wide, narrow]) == \
        "missed: not faster than the 384-d rows (227 vs 232 sentences/s)"
    assert light_targets({**narrow, "sentences_per_second": 300.0}, [98.0, 99.0], [wide]) == "met"
    assert light_targets(wide, [75.6, None], [wide]) == \
        "missed: size > 100 MB; STS17 kept < 97 %; Tatoeba kept < 97 %"


def test_the_out_of_training_sentence_follows_the_signs_of_the_shifts(monkeypatch: pytest.MonkeyPatch) -> None:
    shift = bench_module("quality_report", monkeypatch)._other_languages_shift
    rows = ["all", "training", "other"]

    def sentence(trained: float, other: float) -> str:
        columns = {"base": {"training": 80.0, "other": 60.0},
                   "student": {"training": 80.0 + trained, "other": 60.0 + other}}
        return shift(columns, ["student"], "base", rows)

    assert sentence(3.0, 1.0).endswith("gain less.") and "down" not in sentence(3.0, 1.0)
    assert sentence(-2.0, -6.0).endswith("move down more.")
    assert sentence(2.0, -1.0).endswith("move down.")
    assert sentence(1.0, 2.0).endswith("fare no worse.")


def test_a_baseline_cell_comes_from_the_first_member_that_measured_it(monkeypatch: pytest.MonkeyPatch) -> None:
    report = bench_module("quality_report", monkeypatch)
    params = {"models": {"teacher": "pypi:all-mpnet-base-v2", "student": "pypi:multilingual-e5-small"}}

    def member(name: str, start: dict) -> tuple[dict, dict]:
        summary = {"models": {"student-start": start, "student": {"primary_score": 85.0}}}
        return {"name": name}, {"eval": {"summary": summary}, "params": params}

    early = member("early", {"primary_score": 83.1, "teacher_space_adapter_flores_min": None})
    later = member("later", {"primary_score": 83.0, "teacher_space_adapter_flores_min": 89.4})
    table = markdown_table_after("## Summary\n" + report.summary_table([early, later]), "## Summary")
    start = "mE5-small + head fitted to mpnet-base (no training)"
    assert table["primary score (mean of the STS, retrieval and mining task scores)"][start] == "83.1"
    assert table["... through the adapter, worst language and direction"][start] == "89.4"


def test_benchmarks_md_shows_a_rows_qualification_and_whether_its_code_changed_since(
        monkeypatch: pytest.MonkeyPatch) -> None:
    report = bench_module("report", monkeypatch)
    rows = [{"benchmark": "mining 1e5", "details": {"reference_note": "loop timed on 2000 rows, extrapolated"}},
            {"benchmark": "mining 1e4", "details": {}}]
    assert report._notes(rows) == "- mining 1e5: loop timed on 2000 rows, extrapolated\n"
    line = report.freshness_line("mining", ROOT / "bench" / "results" / "mining.json")
    assert line.startswith("Results committed in ") and ("unchanged since" in line or "changed since" in line)


def test_results_md_checks_the_targets_on_the_committed_embedded_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """RESULTS.md's targets for the embedded default are those of the metrics committed beside it: a `dvc repro`
    that changed them without `python bench/quality.py report` after it leaves a stale RESULTS.md."""
    report = bench_module("quality_report", monkeypatch)
    default = report.embedded_default(ROOT)
    assert default, "the project has no metrics/eval/summary.json (run dvc repro)"
    entry = report.targets_section(default).split("\n", 4)[4].strip()  # the entry, without the section's heading
    assert entry.startswith("**the embedded default") and "targets met" in entry
    assert entry in (ROOT / "RESULTS.md").read_text(), "RESULTS.md is stale: run `python bench/quality.py report`"


@pytest.mark.slow
def test_quality_run_tiny_member_registers_exports_and_reports(tmp_path: Path, mirror_dir: Path) -> None:
    project = make_pipeline_project(tmp_path / "project", mirror_dir)
    config = tmp_path / "quality.yaml"
    config.write_text(yaml.safe_dump({
        "common": {"train.steps": 4},
        "members": [{"name": "tiny-minilm", "label": "tiny student <- MiniLM",
                     "overrides": {"models.teacher": "pypi:all-minilm-l6-v2"}},
                    {"name": "never-run", "label": "not run"}],
        "ablation": [{"name": "tiny-ablation", "label": "tiny variant", "overrides": {"train.learning_rate": 1.0e-5}}],
    }), encoding="utf-8")
    results, output = tmp_path / "results", tmp_path / "RESULTS.md"
    env = {**pipeline_env(), "PREFECT_HOME": str(tmp_path / "prefect"),
           "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "quality.py"), "run", "--members", "tiny-minilm", "tiny-ablation",
         "--config", str(config),
         "--project", str(project), "--results", str(results), "--output", str(output)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]

    member = results / "tiny-minilm"
    run_info = json.loads((member / "run.json").read_text())
    # the gate judged it (a 4-step student of a 2-layer base may be refused against its base; the reason is kept)
    promotion = run_info["flow_result"]["promotion"]
    assert promotion["decision"] in ("promoted", "refused") and promotion["reasons"]
    assert run_info["student"]["dimension"] == 384 and run_info["student"]["sentences_per_second"] > 0
    assert yaml.safe_load((member / "params.yaml").read_text())["train"]["steps"] == 4
    summary = json.loads((member / "metrics/eval/summary.json").read_text())
    assert set(summary["models"]) == {"student", "student-start", "student-untrained", "teacher"}
    # the experiment is in the project, its params as run; the project's own params untouched
    refs = subprocess.run(["git", "for-each-ref", "--format=%(refname)", "refs/exps"], cwd=project,
                          capture_output=True, text=True, check=True).stdout
    assert run_info["experiment"] in refs
    assert yaml.safe_load((project / "params.yaml").read_text())["train"]["steps"] == 6
    assert not list(project.parent.glob(f".{project.name}-exp-*"))  # workspace removed

    report = output.read_text()
    assert "## STS17" in report and "mUSE (R&G 2020, T1/T2)" in report and "Members not run yet: never-run" in report
    table = markdown_table_after(report, "## Summary")
    assert float(table["Tatoeba average (training languages)"]["tiny student <- MiniLM"]) == pytest.approx(
        summary["tatoeba_average"], abs=0.05)
    assert float(table["primary score (mean of the STS, retrieval and mining task scores)"]["teacher MiniLM-L6 (English)"]) == \
        pytest.approx(summary["models"]["teacher"]["primary_score"], abs=0.05)
    # the ablation table has the references and the variant, with the dev numbers that chose it
    ablation = report[report.index("## Ablation"):]
    assert "mE5-small, untrained" in ablation and "(`tiny-ablation`)" in ablation and "learning_rate=1e-05" in ablation
    assert "## Targets" in report and "targets met" in report
    # report alone rebuilds the same file from the exports (and the same project's own metrics: none here)
    assert "the embedded default" not in report
    os.remove(output)
    again = subprocess.run([sys.executable, str(ROOT / "bench" / "quality.py"), "report", "--config", str(config),
                            "--results", str(results), "--output", str(output), "--project", str(project)],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert output.read_text() == report
    check_light_section(config, results, tmp_path / "light", env)

    # tatoeba-all: the registered student (from the MLflow store) and the untrained one on chosen languages,
    # as many pairs as the pipeline's own Tatoeba evaluation (tiny params: 40)
    codes = ["deu", "spa", "fra"]

    def tatoeba_all() -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(ROOT / "bench" / "quality.py"), "tatoeba-all", "--config", str(config), "--project",
             str(project), "--results", str(results), "--output", str(output), "--mirror", str(mirror_dir),
             "--codes", *codes, "--max-pairs", "40"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)

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
        tatoeba["tiny-minilm"]["average"], abs=0.05)
    assert float(table["average, the other languages"]["tiny student <- MiniLM"]) == pytest.approx(
        tatoeba["tiny-minilm"]["scores"]["fra"]["average"], abs=0.05)
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
    light_config.write_text(yaml.safe_dump({
        **yaml.safe_load(config.read_text()), "ablation_winner": "tiny-ablation",
        "light": [{"name": "tiny-light", "label": "tiny light", "overrides": {"train.student.keep_layers": 1}}],
    }), encoding="utf-8")
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "quality.py"), "report", "--config", str(light_config),
                           "--results", str(folder / "results"), "--output", str(folder / "RESULTS.md")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = markdown_table_after((folder / "RESULTS.md").read_text(), "## Light students")
    light, full = rows["tiny light (`tiny-light`)"], rows["full student (the default recipe when the light rows ran) (`tiny-ablation`)"]
    assert light["% of full STS17"] == light["% of full Tatoeba"] == "100.0"
    assert "keep_layers=1" in light["changed (`-S` over the default)"] and full["speed x"] == "1.00"
    student = json.loads((results / "tiny-ablation" / "run.json").read_text())["student"]
    assert light["parameters"] == f"{student['parameters'] / 1e6:.1f}M"
