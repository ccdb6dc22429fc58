"""Streaming sampling helpers: flat memory whatever the stream length, reproducible with a seed."""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def source_targets(available: dict[str, int], weights: dict[str, float], cap: int | None, max_repeats: float) -> dict[str, int]:
    """How many training pairs to draw from each source.

    With a ``cap``, sources share it in proportion to their weights (the paper draws roughly equal
    numbers per dataset); without, each source gives ``available * weight``. A source never gives
    more than ``max_repeats`` times what it has (small sources are repeated, up to that).
    """
    live = {name: w for name, w in weights.items() if w > 0 and available.get(name, 0) > 0}
    total_weight = sum(live.values())
    targets = {}
    for name in available:
        if name not in live:
            targets[name] = 0
            continue
        wanted = cap * live[name] / total_weight if cap is not None else available[name] * live[name]
        targets[name] = int(round(min(wanted, available[name] * max_repeats)))
    return targets


def split_evenly(total: int, sizes: dict[str, int], max_repeats: float) -> dict[str, int]:
    """Split a source's target over its languages equally, each capped at ``max_repeats`` x its size."""
    live = [k for k, n in sizes.items() if n > 0]
    out = dict.fromkeys(sizes, 0)
    if not live or total <= 0:
        return out
    share, extra = divmod(total, len(live))
    for position, key in enumerate(sorted(live)):
        out[key] = int(min(share + (position < extra), sizes[key] * max_repeats))
    return out


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
