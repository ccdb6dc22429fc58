"""Sampling helpers: evenly spread subsets, and streaming samples with flat memory whatever the stream
length, reproducible with a seed."""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from typing import TypeVar

import numpy as np

from xdistill.errors import XdistillError

T = TypeVar("T")


def evenly_spaced(total: int, count: int) -> np.ndarray:
    """``min(count, total)`` distinct indices spread evenly over ``range(total)``, first and last included.

    Files list their rows grouped (by language, by corpus): the first ``count`` rows would all come from
    one group, an even spread draws from each in proportion.
    """
    if count <= 0:
        raise XdistillError(f"a subset needs at least one item, got {count}")
    return np.unique(np.linspace(0, total - 1, num=min(count, total)).round().astype(np.int64))


def fill_in_proportion(total: int, weights: dict[str, float], limits: dict[str, int]) -> dict[str, int]:
    """Integers summing to ``min(total, sum(limits))``, in proportion to ``weights``, none above its limit.

    A key that would exceed its limit gets exactly its limit and the rest is shared again among the
    others ("water-filling"); fractions go to the largest remainders, so the sum is exact.
    """
    out = dict.fromkeys(weights, 0)
    open_keys = {k for k, w in weights.items() if w > 0 and limits.get(k, 0) > 0}
    left = min(total, sum(limits[k] for k in open_keys))
    while open_keys and left > 0:
        scale = left / sum(weights[k] for k in open_keys)
        capped = {k for k in open_keys if weights[k] * scale >= limits[k]}
        if not capped:
            shares = {k: weights[k] * scale for k in open_keys}
            floors = {k: int(v) for k, v in shares.items()}
            spare = left - sum(floors.values())
            for k in sorted(open_keys, key=lambda k: (floors[k] - shares[k], k))[:spare]:
                floors[k] += 1
            out.update(floors)
            break
        for k in capped:
            out[k] = limits[k]
            left -= limits[k]
        open_keys -= capped
    return out


def source_targets(
    available: dict[str, int], weights: dict[str, float], cap: int | None, max_repeats: float
) -> dict[str, int]:
    """How many training pairs to draw from each source.

    With a ``cap``, sources share it in proportion to their weights (the paper draws roughly equal
    numbers per dataset); a source never gives more than ``max_repeats`` times what it has (small
    sources are repeated up to that) and what it cannot give goes to the others. Without a cap, each
    source gives ``available * weight`` (weight = repeat factor, also capped by ``max_repeats``).
    """
    limits = {name: int(n * max_repeats) for name, n in available.items()}
    weights = {name: weights.get(name, 0.0) for name in available}
    if cap is None:
        return {name: min(int(round(available[name] * weights[name])), limits[name]) for name in available}
    return fill_in_proportion(cap, weights, limits)


def split_evenly(total: int, sizes: dict, max_repeats: float) -> dict:
    """Split a source's target equally over its languages (each at most ``max_repeats`` x its size)."""
    return fill_in_proportion(total, {k: 1.0 for k in sizes}, {k: int(n * max_repeats) for k, n in sizes.items()})


def repeat_and_select(items: Iterable[T], available: int, wanted: int, rng: random.Random) -> Iterator[T]:
    """Yield ``wanted`` items from a stream of ``available``: every item ``wanted // available`` times,
    plus a uniform random subset of ``wanted % available`` items (Knuth's selection sampling, O(1) memory)."""
    if available <= 0 or wanted <= 0:
        return
    copies, remainder = divmod(wanted, available)
    seen = 0
    for item in items:
        times = copies
        if remainder and rng.random() * (available - seen) < remainder:
            times += 1
            remainder -= 1
        seen += 1
        for _ in range(times):
            yield item


class Reservoir:
    """Uniform random sample of fixed size from a stream (Algorithm R)."""

    def __init__(self, size: int, rng: random.Random) -> None:
        self.size = size
        self.rng = rng
        self.items: list = []
        self.seen = 0

    def offer(self, item) -> None:
        self.seen += 1
        if len(self.items) < self.size:
            self.items.append(item)
        else:
            slot = self.rng.randrange(self.seen)
            if slot < self.size:
                self.items[slot] = item


def interleave(streams: dict[str, tuple[int, Iterator[T]]], rng: random.Random) -> Iterator[T]:
    """Merge streams of known lengths in a random order that keeps each stream's share even throughout."""
    remaining = {key: count for key, (count, _) in streams.items() if count > 0}
    iterators = {key: it for key, (_, it) in streams.items()}
    while remaining:
        keys = list(remaining)
        key = rng.choices(keys, weights=[remaining[k] for k in keys])[0]
        yield next(iterators[key])
        remaining[key] -= 1
        if remaining[key] == 0:
            del remaining[key]
