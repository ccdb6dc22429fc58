"""Process-group set-up and the collectives of DistributedDataParallel training.

The elastic launcher (:mod:`xdistill.training.launch`, or ``torchrun``) exports ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK`` and the rendezvous address; without them training runs as a single process and no
process group is created. The backend is NCCL when the process trains on a GPU and gloo on CPU (the
tests run 2 CPU processes on gloo). Every decision of the run (validation, early stop, checkpoint choice,
the export) is taken by rank 0 and broadcast, so the ranks can never disagree and hang the job.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from xdistill.errors import XdistillError

# How long a collective waits for every process. While the main process exports the chosen student
# (interpolation measured on dev data at several points, the rotation, the teacher-space adapter), the
# others wait in a barrier: NCCL's default of 10 minutes would end a run whose export takes longer.
COLLECTIVE_TIMEOUT = timedelta(hours=2)

T = TypeVar("T")


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
    def from_env(cls, device: str = "cpu") -> DistContext:
        """Read the launcher's environment, pick the device, and join the process group if needed.

        ``device``: ``"cpu"``, ``"cuda"`` (this process's local GPU: ``LOCAL_RANK`` of the visible ones) or
        an explicit ``"cuda:N"``.
        """
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        wanted = device
        if wanted.startswith("cuda"):
            if not torch.cuda.is_available():
                raise XdistillError(
                    f"train.device {wanted}: CUDA is not available on this machine "
                    f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')!r})"
                )
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

    def broadcast(self, obj: T) -> T:
        """Rank 0's ``obj`` on every process (a decision taken once, e.g. the validation metrics)."""
        if not self.distributed:
            return obj
        holder = [obj]
        dist.broadcast_object_list(holder, src=0, device=self.device if self.device.type == "cuda" else None)
        return holder[0]

    def broadcast_module(self, module: torch.nn.Module) -> None:
        """Copy rank 0's parameters and buffers into ``module`` on every process (after a step only rank 0 ran)."""
        if not self.distributed:
            return
        for tensor in [*module.parameters(), *module.buffers()]:
            dist.broadcast(tensor.data, src=0)

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


def gather_with_local_grad(local: torch.Tensor) -> torch.Tensor:
    """Every process's rows of ``local`` stacked in rank order; the gradient flows back to this process's rows only.

    The in-batch losses see the whole micro-batch this way. Each process then holds the same loss, and the
    gradient of its own rows is the loss's gradient there; DDP averages the gradients over the processes, so
    the caller multiplies the in-batch losses by the process count to keep the 1-process gradient
    (:class:`~xdistill.training.losses.DistillationObjective` does). Cheaper than gathering with autograd
    (no reduce-scatter in the backward pass), and exact as long as every slice has the same size.
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return local
    parts = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, local.detach().contiguous())
    parts[dist.get_rank()] = local
    return torch.cat(parts)


def process_count() -> int:
    """How many processes train together (1 outside a process group)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
