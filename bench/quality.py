"""The quality run: real students for the mirror's languages, side by side with the baselines.

    python bench/quality.py run                      # every member of bench/quality.yaml, then RESULTS.md
    python bench/quality.py run --members quality-minilm
    python bench/quality.py tatoeba-all              # Tatoeba over all 112 languages, per model (resumable)
    python bench/quality.py report                   # RESULTS.md from bench/results/quality/

Each member of ``bench/quality.yaml`` is one run of the ``distill`` Prefect flow (flows/distill.py):
the DVC pipeline in a private workspace with the member's ``-S`` overrides, saved as a DVC
experiment in the project, logged and registered in MLflow, then put through the promotion gate.
After each member this script copies the experiment's metrics (from the experiment commit) and
facts about its exported student (dimension, size, encoding speed) into
``bench/results/quality/<member>/``, so ``report`` (bench/quality_report.py) can rebuild
RESULTS.md from committed files at any time.

``tatoeba-all`` scores each registered student (loaded from the MLflow model version its run
registered), the untrained student and mUSE on every language of the LASER Tatoeba test set,
the protocol of LEALLA's and LASER's 112-language averages; one JSON per model in
``bench/results/quality/tatoeba_all/``, so an interrupted run resumes with the next model.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "bench")]

from common import machine_summary, mirror_dir, portable_path  # noqa: E402
from quality_report import TATOEBA_ALL, write_results  # noqa: E402  (the table layout lives in its own module)

CONFIG = REPO_ROOT / "bench" / "quality.yaml"
RESULTS = REPO_ROOT / "bench" / "results" / "quality"
# What the report needs from each experiment commit.
EXPORTED_FILES = ["params.yaml", "metrics/train.json", "metrics/data_report.json", "metrics/register.json"]
EXPORTED_DIRS = ["metrics/eval"]


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


def run_member(project: Path, config: dict[str, Any], member: dict[str, Any], results: Path,
               resume: bool = True) -> dict[str, Any]:
    """One member through the distill flow; returns the flow's result plus what was exported.

    With ``resume``, a workspace that an interrupted run of the same member left behind (its process
    killed, e.g. at the end of a working session) seeds this run's training checkpoints, so the
    training goes on from its last checkpoint (the trainer checks that the settings are the same).
    """
    from flows.distill import distill

    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M")
    experiment = f"{member['name']}-{stamp}"
    workspace = project.parent / f".{project.name}-exp-{experiment}"  # where distill puts it
    # (a leftover of this very name would be wiped by the flow's clone before its checkpoints are read)
    interrupted = [w for w in interrupted_workspaces(project, member["name"]) if w != workspace] if resume else []
    if interrupted:
        print(f"{member['name']}: resuming the training checkpoints of {interrupted[-1]}", flush=True)
    started = time.monotonic()
    try:
        outcome = distill(overrides=member_overrides(config, member), experiment=experiment,
                          project=str(project), keep_workspace=True,
                          **({"resume_from": str(interrupted[-1])} if interrupted else {}))
        for leftover in interrupted:  # their checkpoints served this run; only a finished run deletes them
            shutil.rmtree(leftover, ignore_errors=True)
        wall = time.monotonic() - started
        out = results / member["name"]
        export_experiment(workspace, out)
        facts = student_facts(workspace / "models" / "student", workspace / "data" / "raw")
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
    run_info = {"member": member, "experiment": experiment, "flow_result": outcome, "wall_seconds": round(wall),
                "student": facts, "machine": machine_summary(), "date": stamp,
                "command": f"python bench/quality.py run --members {member['name']}"}
    write_json(out / "run.json", run_info)
    return run_info


def interrupted_workspaces(project: Path, name: str) -> list[Path]:
    """Workspaces of earlier runs of member ``name`` that hold training checkpoints, oldest first.

    A finished run removes its workspace, so one that is left (``.<project>-exp-<name>-<stamp>``)
    belongs to a run whose process was killed. The stamp is matched exactly: member ``a`` never
    picks up the workspace of member ``a-1200``.
    """
    from xdistill.training.checkpoint import LAST
    from xdistill.training.settings import OutputPaths

    pattern = re.compile(rf"\.{re.escape(project.name)}-exp-{re.escape(name)}-\d{{8}}-\d{{4}}")
    checkpoint = OutputPaths().checkpoint_dir / LAST  # where the train stage writes it (as the flow copies it)
    # every match shares the prefix up to the stamp, so the name order is the time order
    return sorted(path for path in project.parent.iterdir()
                  if pattern.fullmatch(path.name) and (path / checkpoint).is_file())


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


def student_facts(student_dir: Path, raw_dir: Path) -> dict[str, Any]:
    """Dimension, parameters, size on disk and CPU encoding speed of an exported student (xdistill.models.facts)."""
    from xdistill.models.facts import SPEED_FILE, speed_sentences
    from xdistill.models.facts import student_facts as measure

    return measure(student_dir, speed_sentences(raw_dir / SPEED_FILE.relative_to("data/raw")))


def tatoeba_models(config: dict[str, Any], results: Path, project: Path) -> dict[str, str]:
    """``{key: model folder or spec}``: each exported member's registered student, then the baselines."""
    import mlflow

    from xdistill.registry.store import client_for, resolve_tracking_uri

    models: dict[str, str] = {}
    baselines: dict[str, str] = {}
    for member in config["members"]:
        folder = results / member["name"]
        if not (folder / "run.json").is_file():
            continue
        run_info = json.loads((folder / "run.json").read_text(encoding="utf-8"))
        params = yaml.safe_load((folder / "params.yaml").read_text(encoding="utf-8"))
        client = client_for(resolve_tracking_uri(params["register"]["tracking_uri"], project))
        uri = client.get_model_version_download_uri(params["register"]["model_name"],
                                                    registered_version(client, params["register"]["model_name"],
                                                                       run_info["flow_result"], folder))
        local = mlflow.artifacts.download_artifacts(artifact_uri=uri)  # a local store: its own folder, no copy
        models[member["name"]] = str(Path(local) / "model.sentence_transformer")
        baselines.setdefault("student-untrained", params["models"]["student"])
        if params["evaluate"].get("muse"):
            baselines.setdefault("muse", "pypi:muse")
    return {**models, **baselines}


def registered_version(client: Any, model_name: str, flow_result: dict[str, Any], folder: Path) -> str:
    """The version of ``model_name`` that the member's own MLflow run registered: found by run id, since version
    numbers start again in a new store and would name another member's student."""
    run_id = flow_result.get("mlflow_run_id")
    versions = [v for v in client.search_model_versions(f"name='{model_name}'") if v.run_id == run_id]
    if not versions:
        raise SystemExit(f"{folder}: MLflow run {run_id} registered no version of {model_name} in this store "
                         f"(run.json says version {flow_result.get('model_version')}): cannot score that student")
    return str(versions[0].version)


def run_tatoeba_all(models: dict[str, str], tatoeba_dir: Path, out_dir: Path, *,
                    codes: list[str] | None = None, max_pairs: int | None = None) -> None:
    """Tatoeba accuracy of each model on every language (or ``codes``); skips models already scored."""
    from xdistill.evaluation.encoding import CachedEncoder
    from xdistill.evaluation.metrics import mean_or_nan
    from xdistill.evaluation.tatoeba import available_codes, evaluate_tatoeba
    from xdistill.models.encoders import load_encoder

    codes = codes or available_codes(tatoeba_dir)
    for key, spec in models.items():
        target = out_dir / f"{key}.json"
        done = json.loads(target.read_text(encoding="utf-8")) if target.is_file() else {}
        if done.get("languages") == codes and done.get("max_pairs") == max_pairs:
            print(f"{key}: already scored ({target})")
            continue
        print(f"{key}: Tatoeba, {len(codes)} languages ({spec})", flush=True)
        started = time.monotonic()
        per_language = evaluate_tatoeba(CachedEncoder(load_encoder(spec), show_progress_bar=True), tatoeba_dir,
                                        codes, max_pairs=max_pairs)
        write_json(target, {"model": portable_path(spec), "languages": codes, "max_pairs": max_pairs,
                            "average": mean_or_nan([r["average"] for r in per_language.values()]),
                            "scores": per_language, "seconds": round(time.monotonic() - started),
                            "machine": machine_summary(), "command": "python bench/quality.py tatoeba-all"})


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train every member (or --members), then write RESULTS.md")
    run.add_argument("--members", nargs="+", default=None,
                     help="member, ablation or light-student names (default: every member); 'ablation' = every "
                          "ablation variant, 'light' = every light student")
    run.add_argument("--skip-done", action="store_true", help="skip entries already exported (resume a queue)")
    run.add_argument("--no-resume", dest="resume", action="store_false",
                     help="start each member's training afresh, ignoring checkpoints an interrupted run left")
    run.add_argument("--config", type=Path, default=CONFIG)
    run.add_argument("--project", type=Path, default=REPO_ROOT, help="the project checkout (a git + DVC repo)")
    run.add_argument("--results", type=Path, default=RESULTS)
    run.add_argument("--output", type=Path, default=REPO_ROOT / "RESULTS.md")
    tatoeba = sub.add_parser("tatoeba-all", help="Tatoeba over all its languages for every model, then RESULTS.md")
    tatoeba.add_argument("--config", type=Path, default=CONFIG)
    tatoeba.add_argument("--project", type=Path, default=REPO_ROOT, help="the project the MLflow store is relative to")
    tatoeba.add_argument("--results", type=Path, default=RESULTS)
    tatoeba.add_argument("--output", type=Path, default=REPO_ROOT / "RESULTS.md")
    tatoeba.add_argument("--mirror", type=Path, default=None,
                         help="the corpora mirror (default: XDISTILL_MIRROR, else ../shared/corpora)")
    tatoeba.add_argument("--codes", nargs="+", default=None, help="Tatoeba language codes (default: all)")
    tatoeba.add_argument("--max-pairs", type=int, default=None, help="first N pairs per language (default: all)")
    tatoeba.add_argument("--only", nargs="+", default=None, help="model keys (member names, student-untrained, muse)")
    report = sub.add_parser("report", help="write RESULTS.md from the exported results")
    report.add_argument("--results", type=Path, default=RESULTS)
    report.add_argument("--config", type=Path, default=CONFIG)
    report.add_argument("--output", type=Path, default=REPO_ROOT / "RESULTS.md")
    report.add_argument("--project", type=Path, default=REPO_ROOT,
                        help="the project whose own metrics (the embedded default) the targets check too")
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
        run_tatoeba_all(models, (args.mirror or mirror_dir()) / "eval" / "tatoeba-laser", args.results / TATOEBA_ALL,
                        codes=args.codes, max_pairs=args.max_pairs)
        write_results(config, args.results, args.output, project)
    else:
        write_results(config, args.results, args.output, project)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
