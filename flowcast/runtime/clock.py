"""Clocks the scheduler reads time from.

The scheduler never calls ``time`` itself: it asks its clock.  A real clock
follows the monotonic wall; a virtual clock only moves when the scheduler
has nothing runnable and jumps straight to the next timer, so a flow that
would take an hour runs in milliseconds and every run of it is identical.
"""

from __future__ import annotations

import time
from typing import Protocol


def wall_now() -> float:
    """Seconds since the epoch, for what a person reads: log lines, key stamps, status files.

    The one sanctioned wall-clock read outside the clocks here.  Nothing a
    simulated run decides may depend on it, or a seed would stop being a
    trace; name what holds it ``wall_...`` so a reader sees which time it is.
    """
    return time.time()


class Clock(Protocol):
    """What a scheduler needs from a clock."""

    virtual: bool

    def now(self) -> float:
        """Seconds since this clock started."""
        ...


class RealClock:
    """Monotonic time, zero at construction (so traces start at 0)."""

    virtual = False

    def __init__(self) -> None:
        #: ``time.monotonic()`` at zero: a hot path may read the time as
        #: ``time.monotonic() - origin`` itself, a call cheaper than ``now()``.
        self.origin = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self.origin


class VirtualClock:
    """Simulated time that moves only when told to.

    Determinism rests on this: nothing but :meth:`advance_to` changes it, and
    the scheduler calls that only when every micro-thread is waiting.
    """

    virtual = True

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def advance_to(self, when: float) -> None:
        """Move forward to ``when``; time never runs backwards."""
        if when > self._now:
            self._now = when
