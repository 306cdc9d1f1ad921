"""What a lossy link does to a datagram: the fault model, in one place.

The simulated network (on virtual time) and the chaos relay (real UDP on
the real clock) both commit faults through :class:`Impairer`, so "10% loss,
2% duplication, 5% reordering" means the same thing in a unit test and on
loopback, and a seed replays the same choices in both.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass

__all__ = ["Conditions", "Impairer", "delay_pair", "flip_bits"]


@dataclass(frozen=True, slots=True)
class Conditions:
    """How one direction of a link treats datagrams."""

    loss: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    delay: tuple[float, float] = (0.0, 0.0)
    corrupt: float = 0.0
    reorder_window: float = 0.001

    def __post_init__(self) -> None:
        for name in ("loss", "duplicate", "reorder", "corrupt"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
        low, high = self.delay
        if not 0.0 <= low <= high:
            raise ValueError(f"delay must be (min, max) with 0 <= min <= max, got {self.delay!r}")
        if self.reorder_window <= 0.0:
            raise ValueError("reorder_window must be positive")


def delay_pair(delay: float | tuple[float, float]) -> tuple[float, float]:
    if isinstance(delay, (int, float)):
        return (float(delay), float(delay))
    low, high = delay
    return (float(low), float(high))


class Impairer:
    """Decides the fate of one datagram on a link under :class:`Conditions`.

    In this order: lost (probability ``loss``); corrupted (``corrupt``, 1-3
    distinct bits flipped); duplicated (``duplicate``, a second independent
    copy); each copy delayed uniformly within ``delay``, FIFO per link --
    unless *reordered* (``reorder``), which holds it back a further
    ``0 < extra <= reorder_window`` and lets later datagrams pass.  ``key``
    names a link direction; the FIFO rule holds per key.  Events are
    counted in ``counts``.
    """

    def __init__(self, rng: random.Random, counts: Counter[str]) -> None:
        self.random = rng
        self.counts = counts
        self._fifo: dict[Hashable, float] = {}

    def __call__(self, cond: Conditions, data: bytes, now: float, key: Hashable) -> list[tuple[float, bytes]]:
        """``(time, datagram)`` for each copy that will arrive (none if lost)."""
        counts = self.counts
        rng = self.random
        rand = rng.random
        if cond.loss and rand() < cond.loss:
            counts["lost"] += 1
            return []
        if cond.corrupt and data and rand() < cond.corrupt:
            data = flip_bits(rng, data)
            counts["corrupted"] += 1
        copies = 1
        if cond.duplicate and rand() < cond.duplicate:
            copies = 2
            counts["duplicated"] += 1
        out = []
        for _ in range(copies):
            low, high = cond.delay
            when = now + (low if low == high else rng.uniform(low, high))
            if cond.reorder and rand() < cond.reorder:
                counts["reordered"] += 1
                when += cond.reorder_window * (1.0 - rand())  # in (0, window]
            else:
                last = self._fifo.get(key, when)
                if last > when:
                    when = last
                self._fifo[key] = when
            out.append((when, data))
        return out

    def forget(self, key: Hashable) -> None:
        self._fifo.pop(key, None)


def flip_bits(rng: random.Random, data: bytes) -> bytes:
    """``data`` with 1 to 3 distinct random bits flipped."""
    flipped = bytearray(data)
    bits = len(flipped) * 8
    for bit in rng.sample(range(bits), min(bits, rng.randint(1, 3))):
        flipped[bit >> 3] ^= 1 << (bit & 7)
    return bytes(flipped)
