"""Where and how a training run ran: the device, the processes, the precision and the library versions.

Written into ``metrics/train.json`` (``provenance``) and, by the register stage, as tags of the MLflow run,
so a result always says whether it came from a CPU in fp32 or from four GPUs in bf16. The peak memory of
each process is measured here too (resident memory on a CPU, allocated device memory on a GPU).
"""

from __future__ import annotations

import os
import platform
import resource
import sys
from typing import Any

import torch

from xdistill.training.distributed import DistContext


def peak_memory_mb(device: torch.device) -> dict[str, float]:
    """This process's peak resident memory and, on a GPU, its peak allocated device memory (MiB)."""
    # ru_maxrss is KiB on Linux, bytes on macOS
    scale = 1 if sys.platform == "darwin" else 1024
    peak = {"rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20, 1)}
    if device.type == "cuda":
        peak["device_mb"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    return peak


def device_name(device: torch.device) -> str:
    """The GPU's name (``NVIDIA H100 80GB HBM3``), or the CPU's model and its core count."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{cpu_model()} ({os.cpu_count()} cores)"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe_run(ctx: DistContext, precision: str, peaks: list[dict[str, float]]) -> dict[str, Any]:
    """The provenance record of a run whose processes reported ``peaks`` (in rank order)."""
    return {
        "device_type": ctx.device.type,
        "device_name": device_name(ctx.device),
        "processes": ctx.world_size,
        "hosts": int(os.environ.get("GROUP_WORLD_SIZE", "1")),  # set by the elastic launcher: its hosts
        "precision": precision,
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "none",
        "peak_memory_mb": peaks,
    }
