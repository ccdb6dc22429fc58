"""The quality run: real students for the mirror's languages, side by side with the baselines.

    python -m bench.quality run                      # every member of bench/quality/quality.yaml, then RESULTS.md
    python -m bench.quality run --members quality-minilm
    python -m bench.quality tatoeba-all              # Tatoeba over all 112 languages, per model (resumable)
    python -m bench.quality report                   # RESULTS.md from bench/results/quality/

Each member of ``bench/quality/quality.yaml`` is one run of the ``distill`` Prefect flow (flows/distill.py):
the DVC pipeline in a private workspace with the member's ``-S`` overrides, saved as a DVC
experiment in the project, logged and registered in MLflow, then put through the promotion gate
(:mod:`bench.quality.members`). After each member the experiment's metrics (from the experiment commit)
and facts about its exported student (dimension, size, encoding speed) are copied into
``bench/results/quality/<member>/`` (:mod:`bench.quality.results`), so ``report``
(:mod:`bench.quality.report`) can rebuild RESULTS.md from committed files at any time.

``tatoeba-all`` (:mod:`bench.quality.tatoeba_all`) scores each registered student (loaded from the MLflow
model version its run registered), the untrained student and mUSE on every language of the LASER Tatoeba
test set, the protocol of LEALLA's and LASER's 112-language averages; one JSON per model in
``bench/results/quality/tatoeba_all/``, so an interrupted run resumes with the next model.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from bench.paths import REPO_ROOT, mirror_dir
from bench.quality.config import CONFIG, load_config, runs
from bench.quality.members import run_member
from bench.quality.report import write_results
from bench.quality.results import RESULTS, TATOEBA_ALL
from bench.quality.tatoeba_all import run_tatoeba_all, tatoeba_models


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.quality", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train every member (or --members), then write RESULTS.md")
    run.add_argument(
        "--members",
        nargs="+",
        default=None,
        help="member, ablation or light-student names (default: every member); 'ablation' = every "
        "ablation variant, 'light' = every light student",
    )
    run.add_argument("--skip-done", action="store_true", help="skip entries already exported (resume a queue)")
    run.add_argument(
        "--no-resume",
        dest="resume",
        action="store_false",
        help="start each member's training afresh, ignoring checkpoints an interrupted run left",
    )
    run.add_argument("--config", type=Path, default=CONFIG)
    run.add_argument("--project", type=Path, default=REPO_ROOT, help="the project checkout (a git + DVC repo)")
    run.add_argument("--results", type=Path, default=RESULTS)
    run.add_argument("--output", type=Path, default=REPO_ROOT / "RESULTS.md")
    tatoeba = sub.add_parser("tatoeba-all", help="Tatoeba over all its languages for every model, then RESULTS.md")
    tatoeba.add_argument("--config", type=Path, default=CONFIG)
    tatoeba.add_argument("--project", type=Path, default=REPO_ROOT, help="the project the MLflow store is relative to")
    tatoeba.add_argument("--results", type=Path, default=RESULTS)
    tatoeba.add_argument("--output", type=Path, default=REPO_ROOT / "RESULTS.md")
    tatoeba.add_argument(
        "--mirror",
        type=Path,
        default=None,
        help="the corpora mirror (default: XDISTILL_MIRROR, else ../shared/corpora)",
    )
    tatoeba.add_argument("--codes", nargs="+", default=None, help="Tatoeba language codes (default: all)")
    tatoeba.add_argument("--max-pairs", type=int, default=None, help="first N pairs per language (default: all)")
    tatoeba.add_argument("--only", nargs="+", default=None, help="model keys (member names, student-untrained, muse)")
    report = sub.add_parser("report", help="write RESULTS.md from the exported results")
    report.add_argument("--results", type=Path, default=RESULTS)
    report.add_argument("--config", type=Path, default=CONFIG)
    report.add_argument("--output", type=Path, default=REPO_ROOT / "RESULTS.md")
    report.add_argument(
        "--project",
        type=Path,
        default=REPO_ROOT,
        help="the project whose own metrics (the embedded default) the targets check too",
    )
    args = parser.parse_args(argv)
    config = load_config(args.config)
    project = args.project.resolve()
    if args.command == "run":
        chosen = args.members or [m["name"] for m in config["members"]]
        for group in ("ablation", "light"):
            if group in chosen:
                chosen = [n for n in chosen if n != group] + [m["name"] for m in config[group]]
        unknown = sorted(set(chosen) - {m["name"] for m in runs(config)})
        if unknown:
            raise SystemExit(f"unknown member(s) {unknown} in {args.config}")
        os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
        by_name = {member["name"]: member for member in runs(config)}
        for member in (by_name[name] for name in dict.fromkeys(chosen)):  # in the order asked for
            if args.skip_done and (args.results / member["name"] / "run.json").is_file():
                print(f"{member['name']}: already exported, skipped")
                continue
            info = run_member(project, config, member, args.results, resume=args.resume)
            print(f"{member['name']}: {json.dumps(info['flow_result'].get('promotion', {}))}")
            write_results(config, args.results, args.output, project)
    elif args.command == "tatoeba-all":
        models = tatoeba_models(config, args.results, project)
        if args.only:
            models = {key: spec for key, spec in models.items() if key in args.only}
        run_tatoeba_all(
            models,
            (args.mirror or mirror_dir()) / "eval" / "tatoeba-laser",
            args.results / TATOEBA_ALL,
            codes=args.codes,
            max_pairs=args.max_pairs,
        )
        write_results(config, args.results, args.output, project)
    else:
        write_results(config, args.results, args.output, project)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
