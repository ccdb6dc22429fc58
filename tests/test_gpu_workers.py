"""GPU workers never share a GPU: a real Prefect server, two gpu-pool workers with their own
CUDA_VISIBLE_DEVICES and ``--limit 1`` (started as scripts/prefect_up.sh --gpu-worker-per-gpu starts them),
and a probe flow deployed with the job variables of prefect.yaml's gpu and cpu deployments.

No GPU is needed: what is checked is which device each flow run is given, and when it runs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from flows.local_stack import PROJECT_ROOT, LocalStack, free_port

PROBE_SECONDS = 6  # each run holds its worker this long: longer than a worker's poll, so both get work
GPU_RUNS = 4

PROBE_FLOW = """\
import json, os, time
from pathlib import Path

import psutil
from prefect import flow


@flow(name="probe")
def probe(tag: str, out_dir: str, profile: str | None = None, train_processes: str | int | None = None) -> None:
    seen = {
        "tag": tag,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "ancestors": [process.pid for process in psutil.Process().parents()],
        "profile": profile,
        "train_processes": train_processes,
        "start": time.time(),
    }
    time.sleep(%(seconds)s)
    seen["end"] = time.time()
    Path(out_dir, tag + ".json").write_text(json.dumps(seen))
"""


def project_deployments() -> dict[str, dict[str, Any]]:
    """The distill deployments of the project's prefect.yaml, by name."""
    config = yaml.safe_load((PROJECT_ROOT / "prefect.yaml").read_text(encoding="utf-8"))
    return {d["name"]: d for d in config["deployments"] if d["entrypoint"] == "flows/distill.py:distill"}


def test_the_gpu_deployment_leaves_the_device_to_its_worker_and_the_cpu_ones_hide_gpus() -> None:
    config = yaml.safe_load((PROJECT_ROOT / "prefect.yaml").read_text(encoding="utf-8"))
    for deployment in config["deployments"]:
        env = (deployment["work_pool"].get("job_variables") or {}).get("env") or {}
        if deployment["work_pool"]["name"] == "gpu":
            assert "CUDA_VISIBLE_DEVICES" not in env, f"{deployment['name']}: a GPU fixed for every worker"
            assert deployment["parameters"] == {"profile": "gpu", "train_processes": "auto"}
        else:
            assert env.get("CUDA_VISIBLE_DEVICES") == "", f"{deployment['entrypoint']}: a cpu run may take a GPU"


def probe_project(folder: Path) -> Path:
    """A folder with the probe flow and a prefect.yaml deploying it as the project deploys distill (gpu, cpu)."""
    folder.mkdir()
    (folder / "probe.py").write_text(PROBE_FLOW % {"seconds": PROBE_SECONDS}, encoding="utf-8")
    deployments = []
    for name, deployment in project_deployments().items():
        deployments.append({**deployment, "name": f"{name}-probe", "entrypoint": "probe.py:probe"})
    config = {"name": "probe", "prefect-version": "3", "deployments": deployments}
    (folder / "prefect.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return folder


def run_deployments(stack: LocalStack, runs: list[tuple[str, str]], out_dir: Path) -> list[Any]:
    """Create a flow run of each (deployment, tag) and wait for all of them to finish."""
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: stack.api_url}):
        created = [
            run_deployment(deployment, parameters={"tag": tag, "out_dir": str(out_dir)}, timeout=0)
            for deployment, tag in runs
        ]
        deadline = time.monotonic() + 420
        with get_client(sync_client=True) as client:
            while time.monotonic() < deadline:
                states = [client.read_flow_run(run.id).state for run in created]
                if all(state is not None and state.is_final() for state in states):
                    return states
                time.sleep(1)
    raise AssertionError(f"flow runs not finished in time: {[state.name if state else None for state in states]}")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_two_gpu_workers_each_run_one_flow_run_at_a_time_on_their_own_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")  # as on a host with two GPUs
    monkeypatch.setenv("PREFECT_WORKER_QUERY_SECONDS", "1")
    folder = probe_project(tmp_path / "probe")
    out_dir = tmp_path / "seen"
    out_dir.mkdir()
    stack = LocalStack(home=tmp_path / "prefect", port=free_port(), log_dir=tmp_path / "logs")
    try:
        stack.start_server()
        stack.create_pools()
        stack.deploy(folder)
        assert stack.start_gpu_workers(per_gpu=True) == ["0", "1"]
        gpu_of_worker = {worker.pid: gpu for worker, gpu in zip(stack.workers, ("0", "1"), strict=True)}
        cpu_worker = stack.start_worker("cpu", {"CUDA_VISIBLE_DEVICES": "0"})  # a cpu worker on a GPU host
        runs = [("probe/gpu-probe", f"gpu-{number}") for number in range(GPU_RUNS)] + [("probe/cpu-probe", "cpu")]
        states = run_deployments(stack, runs, out_dir)
    finally:
        stack.stop()
    assert [state.name for state in states] == ["Completed"] * len(runs), f"logs: {tmp_path / 'logs'}"
    seen = {tag: json.loads((out_dir / f"{tag}.json").read_text()) for _, tag in runs}

    cpu = seen.pop("cpu")
    assert cpu_worker.pid in cpu["ancestors"]
    assert cpu["cuda_visible_devices"] == ""  # the cpu deployment hides the host's GPUs
    by_worker: dict[int, list[dict[str, Any]]] = {pid: [] for pid in gpu_of_worker}
    for tag, run in seen.items():
        (worker,) = [pid for pid in gpu_of_worker if pid in run["ancestors"]]
        assert run["cuda_visible_devices"] == gpu_of_worker[worker], f"{tag} ran on another GPU than its worker's"
        assert (run["profile"], run["train_processes"]) == ("gpu", "auto")  # the deployment's parameters
        by_worker[worker].append(run)
    assert all(by_worker.values()), f"a worker ran nothing: {by_worker}"  # both GPUs were used
    for worker, runs_there in by_worker.items():
        ordered = sorted(runs_there, key=lambda run: run["start"])
        for before, after in zip(ordered, ordered[1:], strict=False):
            assert before["end"] <= after["start"], f"worker on GPU {gpu_of_worker[worker]} ran two at once"
