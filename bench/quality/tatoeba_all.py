"""Tatoeba over every language of the LASER test set, per model: the registered students and the baselines.

Each registered student is loaded from the MLflow model version its run registered, beside the untrained
student and mUSE: the protocol of LEALLA's and LASER's 112-language averages. One JSON per model in
``bench/results/quality/tatoeba_all/``, so an interrupted run resumes with the next model.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml

from bench.machine import machine_summary
from bench.paths import portable_path
from bench.quality.results import write_json


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
        uri = client.get_model_version_download_uri(
            params["register"]["model_name"],
            registered_version(client, params["register"]["model_name"], run_info["flow_result"], folder),
        )
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
        raise SystemExit(
            f"{folder}: MLflow run {run_id} registered no version of {model_name} in this store "
            f"(run.json says version {flow_result.get('model_version')}): cannot score that student"
        )
    return str(versions[0].version)


def run_tatoeba_all(
    models: dict[str, str],
    tatoeba_dir: Path,
    out_dir: Path,
    *,
    codes: list[str] | None = None,
    max_pairs: int | None = None,
) -> None:
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
        per_language = evaluate_tatoeba(
            CachedEncoder(load_encoder(spec), show_progress_bar=True), tatoeba_dir, codes, max_pairs=max_pairs
        )
        write_json(
            target,
            {
                "model": portable_path(spec),
                "languages": codes,
                "max_pairs": max_pairs,
                "average": mean_or_nan([r["average"] for r in per_language.values()]),
                "scores": per_language,
                "seconds": round(time.monotonic() - started),
                "machine": machine_summary(),
                "command": "python -m bench.quality tatoeba-all",
            },
        )
