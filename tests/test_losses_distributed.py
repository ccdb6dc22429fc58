"""Every loss gives the 1-process result when the batch is split over 2 gloo processes.

Each process embeds its slice of the batch with the same linear "student"; the in-batch losses gather the
slices (:func:`xdistill.training.distributed.gather_with_local_grad`) and the gradients are averaged over the
processes as DistributedDataParallel averages them. The loss value and the student's gradient must match
the single process that embeds the whole batch.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from xdistill.training.losses import LOSS_NAMES, DistillationObjective

BATCH, IN_DIM, STUDENT_DIM, TEACHER_DIM = 8, 12, 6, 6
WORLD = 2
TOLERANCE = {"atol": 1e-10, "rtol": 1e-8}  # float64: the split changes only the order of the sums


def loss_config(name: str) -> dict[str, float]:
    return {"mse": 0.0, name: 1.0}


def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(student weights, source inputs, translation inputs, teacher vectors) of one batch, float64."""
    generator = torch.Generator().manual_seed(3)
    weights = torch.randn(IN_DIM, STUDENT_DIM, generator=generator, dtype=torch.float64)
    src = torch.randn(BATCH, IN_DIM, generator=generator, dtype=torch.float64)
    tgt = src + 0.3 * torch.randn(BATCH, IN_DIM, generator=generator, dtype=torch.float64)
    teacher = torch.randn(BATCH, TEACHER_DIM, generator=generator, dtype=torch.float64)
    return weights, src, tgt, teacher


def loss_and_gradient(name: str, rows: slice | None) -> tuple[float, torch.Tensor]:
    """The loss and the gradient of the student's weights, from ``rows`` of the batch (None: all of it)."""
    weights, src, tgt, teacher = batch()
    weights.requires_grad_(True)
    torch.manual_seed(0)
    objective = DistillationObjective(loss_config(name), STUDENT_DIM, TEACHER_DIM).double()
    if rows is not None:
        src, tgt, teacher = src[rows], tgt[rows], teacher[rows]
    total, _ = objective._losses(src @ weights, tgt @ weights, teacher)  # float64: no autocast involved
    total.backward()
    assert weights.grad is not None
    return float(total.detach()), weights.grad


def rank_main(rank: int, port: int, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    results = {}
    for name in LOSS_NAMES:
        value, gradient = loss_and_gradient(name, slice(rank, None, WORLD))  # the trainer's slice of a batch
        dist.all_reduce(gradient)  # what DDP does with the gradients of the replicas: their mean
        values = [torch.zeros(1, dtype=torch.float64) for _ in range(WORLD)]
        dist.all_gather(values, torch.tensor([value], dtype=torch.float64))
        results[name] = (sum(float(v) for v in values) / WORLD, gradient / WORLD)
    if rank == 0:
        torch.save(results, out)
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def two_process_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[float, torch.Tensor]]:
    out = tmp_path_factory.mktemp("ddp-losses") / "results.pt"
    mp.spawn(rank_main, args=(free_port(), str(out)), nprocs=WORLD, join=True)
    return torch.load(Path(out))


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_two_processes_give_the_one_process_loss_and_gradient(
    name: str, two_process_results: dict[str, tuple[float, torch.Tensor]]
) -> None:
    value, gradient = loss_and_gradient(name, None)
    split_value, split_gradient = two_process_results[name]
    # pair losses are means over each slice (their mean is the batch's); in-batch losses are the same gathered loss
    assert split_value == pytest.approx(value, rel=1e-9)
    torch.testing.assert_close(split_gradient, gradient, **TOLERANCE)
    assert gradient.abs().sum() > 0  # a zero gradient would make the comparison vacuous


def test_without_the_gather_the_in_batch_losses_would_differ() -> None:
    """The check above can fail: ranking within each slice alone gives another loss than ranking the batch."""
    whole, _ = loss_and_gradient("additive_margin_softmax", None)
    halves = [loss_and_gradient("additive_margin_softmax", slice(rank, None, WORLD))[0] for rank in range(WORLD)]
    assert abs(sum(halves) / WORLD - whole) > 1e-3
