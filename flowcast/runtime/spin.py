"""Spinning briefly before blocking, while traffic is dense: a round trip without two wake-ups.

A process blocked in ``epoll`` that a datagram wakes pays the kernel's
wake-up and the scheduler's way back to it: measured here, a raw UDP round
trip between two processes is about 78 us when both block and 20 us when
both poll (NOTES.md), and a road's echo spent most of its ~190 us there.
Polling for a short while before blocking takes those wake-ups away --
but only where the answer comes within that while.  So the spin arms
itself from what it sees:

* a blocking wait whose events came within :data:`SPIN` seconds arms it:
  traffic is dense enough that the next one may come as fast;
* an armed wait polls (timeout 0) for up to :data:`SPIN` before it blocks;
  events in that time keep it armed, none disarm it.

An idle house never spins (its waits end by timers, or long after they
began), a house heard from now and then (heartbeats every second from a
thousand remotes: about one a millisecond) seldom does, and one in a
conversation spins at most :data:`SPIN` a wait.  A miss costs one spin
(150 us of CPU) and disarms until traffic is dense again.

Spinning assumes the house has its core to itself -- the design's one
house per core.  Where more houses than cores share a host, a spinning
house holds a core another house needs (measured: four routed houses on
two cores lost 8-12% of their rate), so :func:`budget_for` turns the spin
off for them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

__all__ = ["SPIN", "Spin", "budget_for", "usable_cores"]

#: Seconds an armed wait polls before it blocks: longer than a round trip's far half on one host.
SPIN = 150e-6


class Spin:
    """The adaptive spin of one waiting loop (a scheduler, or a plain ``select`` loop)."""

    __slots__ = ("budget", "armed", "hits", "misses")

    def __init__(self, budget: float = SPIN) -> None:
        if not 0 <= budget < 0.01:
            raise ValueError("a spin budget is 0 (off) to 10 ms")
        self.budget = budget
        self.armed = False
        #: Armed waits that found events while polling, and that did not (each cost a whole spin).
        self.hits = 0
        self.misses = 0

    def wait(self, poll: Callable[[float | None], Any], timeout: float | None) -> Any:
        """``poll(timeout)`` (``selector.select`` or alike: truthy when something is ready), spinning
        first when armed; what the last poll returned."""
        budget = self.budget
        if timeout == 0 or not budget:
            return poll(timeout)
        perf = time.perf_counter
        if self.armed:
            start = perf()
            end = start + (budget if timeout is None or timeout > budget else timeout)
            while True:
                events = poll(0)
                if events:
                    self.hits += 1
                    return events
                if perf() >= end:
                    break
            self.armed = False
            self.misses += 1
            if timeout is not None:
                timeout = max(0.0, timeout - (perf() - start))
                if not timeout:
                    return events
        start = perf()
        events = poll(timeout)
        if events and perf() - start <= budget:
            self.armed = True  # it came within a spin: the next may too
        return events


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def budget_for(houses: int) -> float:
    """The spin budget for one of ``houses`` houses on this host: :data:`SPIN` while each has a core."""
    return SPIN if houses <= usable_cores() else 0.0
