"""Parallel training pairs: one-time tokenisation and length-bucketed batches.

Pairs are tokenised once up front (sentence-transformers' trainer tokenises every batch again)
and batched so that pairs of similar length share a batch, which removes most padding. The batch
order of an epoch is a pure function of ``(seed, epoch)``, so the data position of a run is just
the number of batches consumed: resuming needs no sampler state.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

# The pairs are read by the owner of their file format; the trainer (setup.py) imports them from here.
from xdistill.data.parallel_tsv import ParallelPairs, read_parallel_pairs

__all__ = ["BatchStream", "ParallelPairs", "epoch_batches", "pad_batch", "read_parallel_pairs", "tokenize_texts"]


def tokenize_texts(
    tokenizer, texts: Sequence[str], max_length: int, prompt: str = "", chunk: int = 4096
) -> list[list[int]]:
    """Token ids of ``prompt + text`` for every text, truncated to ``max_length`` (no padding)."""
    ids: list[list[int]] = []
    for start in range(0, len(texts), chunk):
        batch = [prompt + text for text in texts[start : start + chunk]]
        encoded = tokenizer(batch, truncation=True, max_length=max_length, padding=False)
        ids.extend(encoded["input_ids"])
    return ids


def pad_batch(token_ids: Sequence[Sequence[int]], pad_id: int, with_token_types: bool) -> dict[str, torch.Tensor]:
    """Right-pad a list of token-id lists into model features."""
    width = max(len(ids) for ids in token_ids)
    input_ids = torch.full((len(token_ids), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(token_ids), width), dtype=torch.long)
    for row, ids in enumerate(token_ids):
        input_ids[row, : len(ids)] = torch.as_tensor(ids, dtype=torch.long)
        attention[row, : len(ids)] = 1
    features = {"input_ids": input_ids, "attention_mask": attention}
    if with_token_types:
        features["token_type_ids"] = torch.zeros_like(input_ids)
    return features


def epoch_batches(
    lengths: np.ndarray, batch_size: int, seed: int, epoch: int, bucket_batches: int = 64
) -> list[np.ndarray]:
    """Length-bucketed batches of pair indices for one epoch, a pure function of ``(seed, epoch)``.

    The pairs are shuffled, cut into pools of ``bucket_batches`` batches, sorted by length inside
    each pool and cut into batches; the batch order is then shuffled. Every batch has exactly
    ``batch_size`` pairs (the few left over join a later epoch's shuffle), which keeps gradient
    averaging identical however many processes share a batch.
    """
    n = len(lengths)
    if n < batch_size:
        raise ValueError(f"{n} training pairs are fewer than one batch of {batch_size}")
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(n)[: (n // batch_size) * batch_size]
    pool = batch_size * bucket_batches
    batches: list[np.ndarray] = []
    for start in range(0, len(order), pool):
        chunk = order[start : start + pool]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
    return [batches[i] for i in rng.permutation(len(batches))]


class BatchStream:
    """Endless stream of length-bucketed batches; ``position`` batches consumed so far."""

    def __init__(self, lengths: np.ndarray, batch_size: int, seed: int, position: int = 0) -> None:
        self.lengths = lengths
        self.batch_size = batch_size
        self.seed = seed
        self.batches_per_epoch = len(lengths) // batch_size
        self.position = position
        self._epoch = -1
        self._batches: list[np.ndarray] = []

    @property
    def epoch(self) -> int:
        return self.position // max(self.batches_per_epoch, 1)

    def next(self) -> np.ndarray:
        epoch, index = divmod(self.position, self.batches_per_epoch)
        if epoch != self._epoch:
            self._batches = epoch_batches(self.lengths, self.batch_size, self.seed, epoch)
            self._epoch = epoch
        self.position += 1
        return self._batches[index]
