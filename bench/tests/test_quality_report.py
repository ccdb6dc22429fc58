"""RESULTS.md's renderers (bench.quality.sections, targets, columns) on small hand-made results."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.paths import REPO_ROOT
from bench.quality.columns import wall_time_cell
from bench.quality.load import embedded_default
from bench.quality.sections.ablation import stsb_noise_note
from bench.quality.sections.adapter_sweep import adapter_sweep_section
from bench.quality.sections.at_a_glance import glance_section
from bench.quality.sections.summary import summary_table
from bench.quality.sections.tatoeba_all import _other_languages_shift
from bench.quality.targets import light_targets, targets_section
from testbed.markdown import markdown_table_after


def test_wall_time_cell_flags_a_run_resumed_from_checkpoints() -> None:
    """A resumed flow skipped the interrupted run's steps: its row must say so and give the trainer's own
    training time (carried by the checkpoints), not only the shorter wall time of the resumed flow."""
    fresh = {"run": {"wall_seconds": 5400}, "train": {"resumed_from_step": None, "train_seconds": 2700}}
    resumed = {"run": {"wall_seconds": 1800}, "train": {"resumed_from_step": 1200, "train_seconds": 3180}}
    assert wall_time_cell(fresh) == "90 min"
    assert wall_time_cell(resumed) == "30 min (resumed at step 1200; training 53 min in all)"
    # the flow's record of its stages: what ran (minutes) and what came from DVC's caches
    stages = {
        "teacher_embed": {"ran": True, "seconds": 20.0},
        "train": {"ran": True, "seconds": 2880.0},
        "start_adapter": {"ran": False, "seconds": 3.1},
        "baselines": {"ran": False, "seconds": 4.0},
        "evaluate": {"ran": True, "seconds": 840.0},
    }
    recorded = {"run": {"wall_seconds": 3900, "flow_result": {"stages": stages}}, "train": fresh["train"]}
    assert wall_time_cell(recorded) == (
        "65 min (ran teacher_embed 0, train 48, evaluate 14 min; cached start_adapter, baselines)"
    )


def test_the_ablation_notes_the_stsb_interval_at_the_rows_size(tmp_path: Path) -> None:
    probe = tmp_path / "stsb_sample_size.json"
    average = {"monolingual": {"average": {"difference": -0.27, "ci95": [-1.89, 1.16]}}}
    probe.write_text(
        json.dumps(
            {
                "command": "python -m bench.probes.stsb_sample_size ...",
                "sizes": {
                    "100": average,
                    "all": {"monolingual": {"average": {"difference": 0.14, "ci95": [-0.18, 0.48]}}},
                },
            }
        )
    )
    note = stsb_noise_note(probe, 100)
    assert "score 100 pairs" in note and "-0.27 [-1.89, 1.16]" in note and "+0.14 [-0.18, 0.48]" in note
    # rows scored on every pair, or at a size the probe did not measure, or no probe: no note
    assert stsb_noise_note(probe, None) == stsb_noise_note(probe, 300) == ""
    assert stsb_noise_note(tmp_path / "absent.json", 100) == ""


def test_the_adapter_sweep_section_names_the_student_and_the_dev_choice(tmp_path: Path) -> None:
    diagnostics, results = tmp_path / "diagnostics", tmp_path / "quality"
    diagnostics.mkdir()
    (results / "member-a").mkdir(parents=True)
    (results / "member-a" / "run.json").write_text(json.dumps({"flow_result": {"experiment_rev": "abc123"}}))
    assert adapter_sweep_section(diagnostics, results) == ""

    def variant(steps: int, batch: int | None, dev_min: float, flores_min: float) -> dict[str, Any]:
        return {
            "overrides": {"batch_pairs": batch} if batch else {},
            "fit_seconds": 10,
            "steps": steps,
            "dev": {"min": dev_min, "average": 95.0},
            "flores": {"min": flores_min, "average": 94.0},
        }

    (diagnostics / "teacher_adapter_sweep.json").write_text(
        json.dumps(
            {
                "command": "python -m bench.probes.teacher_adapter_sweep WS OUT 100 b2:batch_pairs=2",
                "seconds": 600,
                "teacher": "pypi:all-mpnet-base-v2",
                "student_commit": "abc123",
                "fit_pairs": 100,
                "chosen_on_dev": "b2",
                "variants": {"default": variant(50, None, 86.5, 89.8), "b2": variant(25, 2, 88.0, 91.5)},
            }
        )
    )
    section = adapter_sweep_section(diagnostics, results)
    assert "`member-a`" in section and "100 training pairs" in section
    rows = markdown_table_after(section, "## Teacher-space adapter settings")
    assert (
        rows["1: default"]["changed (train.teacher_adapter)"] == "the defaults" and rows["1: default"]["on dev"] == ""
    )
    assert rows["1: b2"]["changed (train.teacher_adapter)"] == "batch_pairs=2"
    assert rows["1: b2"]["dev worst"] == "88.0" and rows["1: b2"]["on dev"] == "chosen"
    assert "Sweep 1: `python -m bench.probes.teacher_adapter_sweep WS OUT 100 b2:batch_pairs=2` (10 min)." in section


def test_light_rows_say_which_targets_they_miss() -> None:
    wide = {"dimension": 384, "parameters": 26.6e6, "size_mb": 104.5, "sentences_per_second": 231.7}
    narrow = {"dimension": 128, "parameters": 26.6e6, "size_mb": 99.0, "sentences_per_second": 226.9}
    assert (
        light_targets(narrow, [98.0, 99.0], [wide, narrow])
        == "missed: not faster than the 384-d rows (227 vs 232 sentences/s)"
    )
    assert light_targets({**narrow, "sentences_per_second": 300.0}, [98.0, 99.0], [wide]) == "met"
    assert light_targets(wide, [75.6, None], [wide]) == "missed: size > 100 MB; STS17 kept < 97 %; Tatoeba kept < 97 %"


def test_the_out_of_training_sentence_follows_the_signs_of_the_shifts() -> None:
    rows = ["all", "training", "other"]

    def sentence(trained: float, other: float) -> str:
        columns = {
            "base": {"training": 80.0, "other": 60.0},
            "student": {"training": 80.0 + trained, "other": 60.0 + other},
        }
        return _other_languages_shift(columns, ["student"], "base", rows)

    assert sentence(3.0, 1.0).endswith("gain less.") and "down" not in sentence(3.0, 1.0)
    assert sentence(-2.0, -6.0).endswith("move down more.")
    assert sentence(2.0, -1.0).endswith("move down.")
    assert sentence(1.0, 2.0).endswith("fare no worse.")


def test_a_baseline_cell_comes_from_the_first_member_that_measured_it() -> None:
    params = {"models": {"teacher": "pypi:all-mpnet-base-v2", "student": "pypi:multilingual-e5-small"}}

    def member(name: str, start: dict) -> tuple[dict, dict]:
        summary = {"models": {"student-start": start, "student": {"primary_score": 85.0}}}
        return {"name": name}, {"eval": {"summary": summary}, "params": params}

    early = member("early", {"primary_score": 83.1, "teacher_space_adapter_flores_min": None})
    later = member("later", {"primary_score": 83.0, "teacher_space_adapter_flores_min": 89.4})
    table = markdown_table_after("## Summary\n" + summary_table([early, later]), "## Summary")
    start = "mE5-small + head fitted to mpnet-base (no training)"
    assert table["primary score (mean of the STS, retrieval and mining task scores)"][start] == "83.1"
    assert table["... through the adapter, worst language and direction"][start] == "89.4"


def test_results_md_checks_the_targets_on_the_committed_embedded_default() -> None:
    """RESULTS.md's targets for the embedded default are those of the metrics committed beside it: a `dvc repro`
    that changed them without `python -m bench.quality report` after it leaves a stale RESULTS.md."""
    default = embedded_default(REPO_ROOT)
    assert default, "the project has no metrics/eval/summary.json (run dvc repro)"
    entry = targets_section(default).split("\n", 4)[4].strip()  # the entry, without the section's heading
    assert entry.startswith("**the embedded default") and "targets met" in entry
    assert entry in (REPO_ROOT / "RESULTS.md").read_text(), "RESULTS.md is stale: run `python -m bench.quality report`"


def _run_data(languages: list[str], **models: float) -> dict[str, Any]:
    """A run's data as the report loads it: params' languages and the eval summary's primary scores."""
    summary = {
        name: {"primary_score": score, "sts17_crosslingual_average": score - 10} for name, score in models.items()
    }
    return {"params": {"languages": languages}, "eval": {"summary": {"models": summary}}}


def test_the_glance_compares_each_student_with_its_own_runs_untrained_student(tmp_path: Path) -> None:
    """The default run and the quality run score different languages: each student sits in its own table,
    and its gain is against the untrained student scored on the same languages, never the other run's."""
    quality = _run_data(["de", "fr"], **{"student-untrained": 83.1, "muse": 82.5, "student": 85.7})
    default = _run_data(["de"], **{"student-untrained": 82.4, "muse": 82.2, "student": 83.9})
    text = glance_section(
        [({"name": "q"}, quality)], [({"name": "default"}, default)], {}, "q", tmp_path / "glance.png", tmp_path
    )
    default_table = markdown_table_after(text, "**Default run")
    quality_table = markdown_table_after(text, "**Quality run")
    assert default_table["untrained student (mE5-small)"]["primary score"] == "82.4"
    assert quality_table["untrained student (mE5-small)"]["primary score"] == "83.1"
    assert "default student" in default_table and "default student" not in quality_table
    assert "The default student scores 83.9 on the primary score, +1.5 against" in text
    assert "quality student (`q`) scores 85.7 on the primary score, +2.6 against" in text
    assert (tmp_path / "glance.png").is_file()
    # without the chosen member there is nothing to show
    assert glance_section([({"name": "q"}, quality)], [], {}, "other", tmp_path / "g.png", tmp_path) == ""
