"""The skedder: runs a house's framers once per period tick.

Ioflo's skedder, kept exact where it shows in traces: taskables run in a
fixed round-robin order, each when its re-time comes due, and the stamp
advances by adding the period (the same floating-point sums as Ioflo, so
times match to the last digit).  Unlike Ioflo it is a micro-thread of the
house scheduler: between ticks it sleeps on the scheduler's clock, so with
a real clock an idle house blocks in the OS, and with a virtual clock a
whole run takes no wall time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from typing import Any

from flowcast.flow.framer import ABORT, ABORTED, RUNNING, START, STARTED, STOP, STOPPED, Framer
from flowcast.runtime import Scheduler, sleep_until

__all__ = ["Skedder", "Stamp"]


class Stamp:
    """The house's current tick time, readable before the skedder exists.

    Builders need a clock for shares' stamps before the skedder is made;
    the skedder then writes each tick's stamp here.
    """

    __slots__ = ("value",)

    def __init__(self, value: float = 0.0) -> None:
        self.value = value

    def __call__(self) -> float:
        return self.value


class Skedder:
    """Ticks framers; ``stamp`` is the house's notion of now."""

    def __init__(self, taskables: list[Framer], period: float = 0.125, stamp: Stamp | None = None) -> None:
        if period <= 0:
            raise ValueError("skedder period must be positive")
        self.period = float(period)
        self.cell = stamp if stamp is not None else Stamp()
        self.stamp = self.cell.value
        self.ready: deque[tuple[Framer, float, float]] = deque()
        self.aborted: list[Framer] = []
        self.ticks = 0
        self.after_tick: list[Callable[[], None]] = []  # house chores: export polling
        for tasker in taskables:
            tasker.desire = START if tasker.schedule == "active" else STOP
            tasker.status = STOPPED
            self.ready.append((tasker, self.stamp, tasker.period))

    def tick(self) -> bool:
        """Run every due framer once; False when nothing is left running."""
        ready = self.ready
        stamp = self.stamp
        more = False
        for _ in range(len(ready)):
            tasker, retime, period = ready.popleft()
            if retime > stamp:
                ready.append((tasker, retime, period))
                status = tasker.status
            else:
                try:
                    status = tasker.control(tasker.desire)
                except BaseException:
                    # Keep it scheduled so ``abort_all`` exits its frames
                    # (behaviours' ``exit`` hooks run: finally semantics).
                    ready.append((tasker, retime, period))
                    raise
                if status == ABORTED:
                    self.aborted.append(tasker)
                else:
                    ready.append((tasker, retime + tasker.period, tasker.period))
            if status == RUNNING or status == STARTED:
                more = True
        self.ticks += 1
        for chore in self.after_tick:
            chore()
        if not ready or not more:
            return False
        self.stamp += self.period
        self.cell.value = self.stamp
        return True

    def abort_all(self) -> None:
        """Abort what is still scheduled, so exit contexts run (clean stop)."""
        while self.ready:
            tasker, _, _ = self.ready.popleft()
            tasker.control(ABORT)

    def run(self, scheduler: Scheduler, until: float | None = None) -> Generator[Any, Any, None]:
        """Micro-thread body: tick, then sleep until the next tick's time."""
        origin = scheduler.clock.now() - self.stamp
        try:
            while True:
                if until is not None and self.stamp > until + 1e-9:
                    return
                if not self.tick():
                    return
                yield sleep_until(origin + self.stamp)
        finally:
            self.abort_all()
