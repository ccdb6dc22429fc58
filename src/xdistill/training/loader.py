"""A step's inputs, prepared ahead of the step: :class:`StepLoader`.

Micro-batch ``k`` of a run is a pure function of the batch plan (:func:`~xdistill.training.batches.epoch_batches`)
and ``k``, so its inputs (this process's slice of the pairs, padded into the student's features, and the
teacher vectors of its sources) can be built by :class:`torch.utils.data.DataLoader` workers while the
device runs the previous step: padding and the teacher rows' reads leave the critical path, and pinned
memory lets the copy to the GPU overlap the step. With ``runtime.loader_workers: 0`` they are built in
the training process, as they are needed; either way the inputs are the same.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from xdistill.training.batches import epoch_batches, pad_batch
from xdistill.training.tokenized import TeacherRows, TokenizedPairs

MicroBatch = tuple[dict[str, torch.Tensor], torch.Tensor]


class SliceInputs(Dataset[MicroBatch]):
    """Micro-batch number -> (features of this process's slice, its teacher vectors), on the CPU."""

    def __init__(
        self,
        train: TokenizedPairs,
        batch_size: int,
        seed: int,
        rank: int,
        world_size: int,
        pad_id: int,
        with_token_types: bool,
    ) -> None:
        self.train, self.batch_size, self.seed = train, batch_size, seed
        self.rank, self.world_size = rank, world_size
        self.pad_id, self.with_token_types = pad_id, with_token_types
        self.lengths = train.lengths
        self.batches_per_epoch = len(self.lengths) // batch_size
        self._epoch, self._batches = -1, list[np.ndarray]()

    def __len__(self) -> int:  # endless in principle; DataLoader only needs an upper bound with our sampler
        return 2**62

    def slice_at(self, position: int) -> np.ndarray:
        """This process's pairs of micro-batch ``position`` (every ``world_size``-th, from its rank)."""
        epoch, index = divmod(position, self.batches_per_epoch)
        if epoch != self._epoch:  # each worker keeps the plan of the epoch it is in
            self._batches, self._epoch = epoch_batches(self.lengths, self.batch_size, self.seed, epoch), epoch
        return self._batches[index][self.rank :: self.world_size]

    def __getitem__(self, position: int) -> MicroBatch:
        pairs = self.slice_at(position)
        token_ids = [self.train.src[i] for i in pairs] + [self.train.tgt[i] for i in pairs]
        features = pad_batch(token_ids, self.pad_id, self.with_token_types)
        return features, teacher_rows(self.train.teacher, pairs)


def teacher_rows(teacher: torch.Tensor | TeacherRows, pairs: Sequence[int] | np.ndarray) -> torch.Tensor:
    """The teacher vectors of ``pairs``' sources (read from the store when it is memory-mapped)."""
    return teacher[torch.as_tensor(np.asarray(pairs, dtype=np.int64))]


class StepLoader:
    """The inputs of micro-batches ``start, start + 1, ...`` on ``device``, prepared ``workers`` at a time ahead."""

    def __init__(self, inputs: SliceInputs, start: int, device: torch.device, workers: int, pin_memory: bool) -> None:
        self.inputs, self.device, self.position = inputs, device, start
        self._iterator: Iterator[Any] | None = None
        if workers > 0:
            loader = DataLoader(
                inputs,
                batch_size=None,  # items are whole micro-batches
                sampler=range(start, start + 2**62),
                num_workers=workers,
                pin_memory=pin_memory and device.type == "cuda",
                prefetch_factor=2,
                persistent_workers=True,
            )
            self._iterator = iter(loader)

    def next(self) -> tuple[np.ndarray, dict[str, torch.Tensor], torch.Tensor]:
        """(this slice's pair indices, its features, its teacher vectors) of the next micro-batch, on the device."""
        pairs = self.inputs.slice_at(self.position)
        if self._iterator is not None:
            features, teacher = next(self._iterator)
        else:
            features, teacher = self.inputs[self.position]
        self.position += 1
        moved = {k: v.to(self.device, non_blocking=True) for k, v in features.items()}
        return pairs, moved, teacher.to(self.device, non_blocking=True)
