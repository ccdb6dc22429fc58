"""Start the training processes of one host from ``runtime.nproc`` and ``runtime.nnodes``: :func:`launch`.

The ``train`` stage calls it itself, so ``dvc repro``, ``dvc exp run`` and the Prefect flows need nothing
else to train on every GPU of a host, or on several hosts: torch's elastic launcher (what ``torchrun``
runs) starts ``nproc`` copies of the same ``xdistill train`` command, each with its ``RANK``,
``LOCAL_RANK`` and ``WORLD_SIZE``; hosts of one job meet at the c10d rendezvous ``runtime.rdzv_endpoint``
(as ``torchrun --nnodes N --rdzv-backend c10d --rdzv-endpoint host:port``), and a single host uses a
private rendezvous on 127.0.0.1. Each process then joins the process group
(:class:`~xdistill.training.distributed.DistContext`).
"""

from __future__ import annotations

import logging
import os
import sys
import uuid
from collections.abc import Sequence

import torch

from xdistill.errors import XdistillError
from xdistill.training.settings import RuntimeSettings

logger = logging.getLogger(__name__)

# Set by the launcher in every process it starts (and by torchrun): such a process trains, it never launches.
LAUNCHED_MARKERS = ("TORCHELASTIC_RUN_ID", "LOCAL_RANK")


def processes_per_host(runtime: RuntimeSettings, device_type: str) -> int:
    """``runtime.nproc`` as a number: ``auto`` is every visible GPU when training on cuda, one process on a CPU."""
    if runtime.nproc != "auto":
        return int(runtime.nproc)
    if device_type != "cuda":
        return 1
    count = torch.cuda.device_count()
    if count == 0:
        raise XdistillError(
            "params runtime.nproc is auto and train.device is cuda, but no GPU is visible "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')!r})"
        )
    return count


def is_launched() -> bool:
    """Whether this process was started by a launcher (it is one rank of a job)."""
    return any(name in os.environ for name in LAUNCHED_MARKERS)


def needs_launch(runtime: RuntimeSettings, device_type: str) -> bool:
    """Whether the training must start its processes itself (more than one, and none started yet)."""
    return not is_launched() and (processes_per_host(runtime, device_type) > 1 or runtime.nnodes > 1)


def launch(command: Sequence[str], runtime: RuntimeSettings, device_type: str) -> None:
    """Run ``python -m xdistill.cli.main <command>`` as this host's share of the training job; return when
    every process of the job has finished. Raises :class:`XdistillError` when one of them failed."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    nproc = processes_per_host(runtime, device_type)
    if device_type == "cpu":  # processes sharing the cores: torch's default (every core each) oversubscribes
        os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    config = LaunchConfig(
        min_nodes=runtime.nnodes,
        max_nodes=runtime.nnodes,
        nproc_per_node=nproc,
        run_id=runtime.rdzv_id if runtime.rdzv_endpoint else uuid.uuid4().hex,
        rdzv_backend="c10d",
        rdzv_endpoint=runtime.rdzv_endpoint or "127.0.0.1:0",
        max_restarts=runtime.max_restarts,
        start_method="spawn",
        monitor_interval=1.0,
    )
    where = f"{runtime.nnodes} hosts at {runtime.rdzv_endpoint}" if runtime.nnodes > 1 else "this host"
    logger.info("starting %d training processes (%s, %s)", nproc, device_type, where)
    try:
        elastic_launch(config, sys.executable)("-m", "xdistill.cli.main", *command)
    except ChildFailedError as error:
        failures = ", ".join(f"rank {rank} exit code {failure.exitcode}" for rank, failure in error.failures.items())
        raise XdistillError(f"a training process failed ({failures}); its own error is in the log above") from None
