"""Process-group set-up for DistributedDataParallel training under ``torchrun``.

``torchrun`` exports ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and the rendezvous address; without
them training runs as a single process and no process group is created. The backend is NCCL
when the process trains on a GPU and gloo on CPU (the tests run 2 CPU processes on gloo).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from xdistill.errors import XdistillError

# How long a collective waits for every process. While the main process exports the chosen student
# (interpolation measured on dev data at several points, the rotation, the teacher-space adapter), the
# others wait in a barrier: NCCL's default of 10 minutes would end a run whose export takes longer.
COLLECTIVE_TIMEOUT = timedelta(hours=2)


@dataclass
class DistContext:
    """Where this process sits in the (possibly single-process) training job."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    owns_group: bool = False

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_env(cls, device: str | None = None) -> DistContext:
        """Read the torchrun environment, pick the device, and join the process group if needed.

        ``device``: ``"cpu"``, ``"cuda"`` (this process's local GPU under torchrun) or an explicit
        ``"cuda:N"``; None picks CUDA when available.
        """
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        wanted = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if wanted.startswith("cuda"):
            if not torch.cuda.is_available():
                raise XdistillError(f"--device {wanted}: CUDA is not available on this machine")
            resolved = torch.device(wanted if ":" in wanted else f"cuda:{local_rank}")
            torch.cuda.set_device(resolved)
        else:
            resolved = torch.device(wanted)
        owns_group = False
        if world_size > 1 and not dist.is_initialized():
            backend = "nccl" if resolved.type == "cuda" else "gloo"
            dist.init_process_group(backend=backend, rank=rank, world_size=world_size, timeout=COLLECTIVE_TIMEOUT)
            owns_group = True
        return cls(rank, world_size, local_rank, resolved, owns_group)

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def mean(self, values: dict[str, float]) -> dict[str, float]:
        """Average scalar values over all processes (for logging)."""
        if not self.distributed or not values:
            return values
        keys = sorted(values)
        tensor = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64)
        if dist.get_backend() == "nccl":
            tensor = tensor.to(self.device)
        dist.all_reduce(tensor)
        return {k: float(v) / self.world_size for k, v in zip(keys, tensor.cpu().tolist(), strict=True)}

    def gather_objects(self, obj: Any) -> list[Any]:
        """Every process's ``obj``, in rank order (on every process)."""
        if not self.distributed:
            return [obj]
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, obj)
        return gathered

    def close(self) -> None:
        if self.owns_group and dist.is_initialized():
            dist.destroy_process_group()
