"""End-to-end ``dvc repro`` of the embedded default: wall time and peak memory, cold and warm.

Each measurement runs ``dvc repro`` in a throw-away copy of the pipeline (dvc.yaml, params.yaml,
src/: the same copy the end-to-end tests make, testbed/pipeline_project.py) and records its wall
time and the peak resident memory of its largest process:

1. cold: a fresh workspace, an empty DVC cache and an empty model cache (the mE5 conversion
   included): the "<= 15 minutes on 2 cores" target;
2. warm caches: a second fresh workspace sharing the first one's DVC cache (and run cache) and
   the model cache, as a new clone on the same machine would;
3. nothing changed: ``dvc repro`` again;
4. one ``train.*`` param changed: train, evaluate, register and promote re-run.

Rows 2-4 are compared with row 1 (the reference): the ratio is the speed-up over a cold run.

    python -m bench.perf.e2e           # the embedded default params (minutes)
    python -m bench.perf.e2e --tiny    # the tests' tiny params; prints, does not overwrite results
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from bench.paths import mirror_dir
from bench.perf.common import Row, report_rows
from testbed.pipeline_project import make_pipeline_project, pipeline_env

COLD_TARGET_S = 15 * 60

# Runs a command and reports its wall time and the peak RSS of its largest descendant.
_MEASURE = """
import json, resource, subprocess, sys, time
start = time.perf_counter()
proc = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(json.dumps({"wall_s": time.perf_counter() - start, "returncode": proc.returncode,
                  "peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
                  "stdout": proc.stdout[-20000:], "stderr": proc.stderr[-5000:]}))
"""


def measure(cmd: list[str], cwd: Path, env: dict[str, str]) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, *cmd], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    result = json.loads(done.stdout)
    if result["returncode"] != 0:
        raise SystemExit(f"{' '.join(cmd)} failed in {cwd}:\n{result['stdout'][-3000:]}\n{result['stderr']}")
    result["stages_run"] = re.findall(r"Running stage '([^']+)'", result["stdout"])
    result["stages_restored"] = re.findall(r"Stage '([^']+)' is cached", result["stdout"])
    return result


def change_train_steps(project: Path) -> None:
    params_file = project / "params.yaml"
    params = yaml.safe_load(params_file.read_text(encoding="utf-8"))
    params["train"]["steps"] = max(1, int(params["train"]["steps"]) - 2)
    params_file.write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")


def row(name: str, result: dict, cold: dict, target: str = "none", passed: bool | None = None) -> Row:
    return Row(
        benchmark=name,
        ours=f"{result['wall_s']:.1f} s, peak {result['peak_mb']:.0f} MB",
        reference=f"{cold['wall_s']:.1f} s cold",
        ratio=f"{cold['wall_s'] / result['wall_s']:.1f}x faster" if result is not cold else "1.0x",
        target=target,
        passed=passed,
        details={
            "wall_s": result["wall_s"],
            "peak_mb": result["peak_mb"],
            "stages_run": result["stages_run"],
            "stages_restored": result["stages_restored"],
        },
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="the tests' tiny params; results printed, not saved")
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    size = "tiny params" if args.tiny else "embedded default params"
    with tempfile.TemporaryDirectory(prefix="bench-e2e-") as tmp:
        work = Path(tmp)
        env = {**pipeline_env(), "XDISTILL_CACHE_DIR": str(work / "model-cache")}
        first = make_pipeline_project(work / "cold", mirror_dir(), tiny=args.tiny)
        print(f"cold dvc repro ({size}) in {first} ...", flush=True)
        cold = measure(["dvc", "repro"], first, env)
        second = make_pipeline_project(work / "warm", mirror_dir(), tiny=args.tiny)
        subprocess.run(
            ["dvc", "cache", "dir", "--local", str(first / ".dvc" / "cache")],
            cwd=second,
            env=env,
            check=True,
            capture_output=True,
        )
        print("warm-cache dvc repro ...", flush=True)
        warm = measure(["dvc", "repro"], second, env)
        noop = measure(["dvc", "repro"], second, env)
        change_train_steps(second)
        print("dvc repro after a train.steps change ...", flush=True)
        retrain = measure(["dvc", "repro"], second, env)
    cold_ok = None if args.tiny else cold["wall_s"] <= COLD_TARGET_S
    rows = [
        row(
            f"dvc repro, cold ({size}; empty DVC and model caches)",
            cold,
            cold,
            target=f"<= {COLD_TARGET_S // 60} min",
            passed=cold_ok,
        ),
        row(
            f"dvc repro, new workspace with warm caches ({size}; shared DVC cache and run cache, model cache)",
            warm,
            cold,
        ),
        row(f"dvc repro, nothing changed ({size})", noop, cold),
        row(f"dvc repro after a train.steps change ({size}; train, evaluate, register, promote re-run)", retrain, cold),
    ]
    rows[0].details["stages_run"] = cold["stages_run"]
    rows[0].details["threads"] = os.cpu_count()
    report_rows("e2e", rows, args.tiny, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
