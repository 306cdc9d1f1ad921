"""A House: one scheduler, one store, the framers of one flow house.

One house runs per CPU core, each in its own process; this class is what
runs inside that process.  It owns the clock choice (real or virtual), the
skedder micro-thread, and a clean stop: on SIGINT/SIGTERM or :meth:`stop`
the scheduler returns, the skedder is cancelled and every running framer is
aborted, so its exit acts run before the process leaves.  Then, before it
closes, the house drains (flowcast.house.drain): its stacks run on until
what is in flight is acknowledged or ``drain`` seconds pass, and whatever
did not make it is reported -- a stop never loses a message silently.
"""

from __future__ import annotations

import gc
import logging
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flowcast.behaving import Registry
from flowcast.flow.builder import BuiltHouse, build_house
from flowcast.flow.framer import Transition
from flowcast.flow.skedder import Skedder, Stamp
from flowcast.flow.spec import HouseSpec
from flowcast.runtime import Clock, RealClock, Scheduler, VirtualClock
from flowcast.runtime.gcpause import gc_paused
from flowcast.store import Store

log = logging.getLogger("flowcast.house")

__all__ = ["DEFAULT_PERIOD", "House", "load_house"]

#: Seconds between a house's ticks when nothing else says: ``--period``, a layout's ``period:``.
DEFAULT_PERIOD = 0.125


class House:
    """Build a house from its spec and run it on a scheduler.

    A :class:`flowcast.store.HouseLike`: what the layers inside it may use.
    """

    def __init__(
        self,
        spec: HouseSpec,
        *,
        period: float = DEFAULT_PERIOD,
        virtual: bool = False,
        base: Path | None = None,
        registry: Registry | None = None,
        on_transition: Callable[[Transition], None] | None = None,
        out: Callable[[str], None] = print,
    ) -> None:
        if period <= 0:
            raise ValueError("period must be positive")
        self.stamp = Stamp()
        # The scheduler exists before the build: behaviours built now may
        # keep it (``io.house.scheduler``) to run stacks as micro-threads.
        self.scheduler = Scheduler(VirtualClock() if virtual else RealClock())
        # Service slots (flowcast.store.HouseLike): each None until its layer
        # wires the house.  The Router, once attached by the estate launcher
        # or by a flow's own wiring behaviours; CAST and causal, planned.
        self.router: Any = None
        self.cast: Any = None
        self.causal: Any = None
        #: The estate layer's join tries, road channel -> remote estate -> JoinTries (flowcast.house.joining),
        #: which its status file shows for a remote that has not joined.
        self.joining: dict[str, dict[str, Any]] = {}
        self._closers: list[Callable[[], None]] = []
        try:
            self.built: BuiltHouse = build_house(
                spec, stamp=self.stamp, registry=registry, on_transition=on_transition, out=out, base=base, house=self
            )
        except BaseException:
            # A failed or interrupted build (a SIGTERM while a behaviour
            # sets up) still closes what behaviours opened so far.
            self.close()
            raise
        self.skedder = Skedder(self.built.taskables, period, self.stamp)
        self.skedder.after_tick.append(self.store.end_turn)  # a tick is a turn: what it took is acknowledged
        self.stopped_by: signal.Signals | None = None
        #: How the last stop went (flowcast.house.drain.DrainReport); None until a run was stopped.
        self.drained: Any = None
        self._stop_asked = 0  # stops asked (signals or stop()); a second one cuts a drain short
        for framer in self.built.taskables:
            if 0 < framer.period < period:  # Ioflo runs it so too; said, never silently different from what was asked
                log.warning("house %s: framer %s asks to run every %g s, but the house ticks every %g s, so it runs every tick; "
                            "give the house a shorter period (flowcast run --period) for a faster framer",
                            self.built.name, framer.name, framer.period, period)

    @property
    def name(self) -> str:
        return self.built.name

    @property
    def store(self) -> Store:
        return self.built.store

    @property
    def clock(self) -> Clock:
        return self.scheduler.clock

    def on_close(self, closer: Callable[[], None]) -> None:
        """Run ``closer`` when the house stops (stacks, ports, status writers), newest first."""
        self._closers.append(closer)

    def run(self, until: float | None = None, *, handle_signals: bool = False, drain: float = 0.0) -> None:
        """Run until the framers finish, ``until`` flow seconds pass, or a stop.

        After a stop the house drains for up to ``drain`` seconds, then
        closes and reports what was still undelivered (:attr:`drained`;
        with 0 it reports without waiting).  A second signal cuts it short.
        """
        scheduler = self.scheduler
        skedder = scheduler.spawn(self.skedder.run(scheduler, until), name=f"skedder:{self.name}")
        previous = {}
        if handle_signals:
            scheduler.enable_wakeup()

            def on_signal(signum: int, _stack: object) -> None:
                self.stopped_by = signal.Signals(signum)
                self._stop_asked += 1
                scheduler.stop()

            previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        stopping = None
        try:
            scheduler.run()
            if self._stop_asked:  # stopped, not ended: drain before closing
                from flowcast.house.drain import Drain

                by = self.stopped_by.name if self.stopped_by is not None else "stop"
                stopping = Drain(self, drain, by)
                asked = self._stop_asked
                stopping.run(skedder, lambda: self._stop_asked > asked)
        finally:
            try:
                scheduler.close()  # cancels the skedder (if the drain did not): running framers' exit acts run
            finally:
                for s, handler in previous.items():
                    signal.signal(s, handler)
                try:
                    self.close()
                finally:
                    if stopping is not None:  # after the closers: what the stacks failed as they closed is in
                        self.drained = stopping.finish()

    def close(self) -> None:
        """Run the closers, newest first, each once; what :meth:`run` does when it ends.

        Also for a house that never ran: one stopped while it was still
        starting must release its sockets and files all the same.
        """
        while self._closers:
            try:
                self._closers.pop()()
            except Exception:  # noqa: BLE001 - every closer gets its turn
                import logging

                name = getattr(getattr(self, "built", None), "name", "house")
                logging.getLogger("flowcast.house").exception("closing %s", name)

    def stop(self) -> None:
        """Stop the run (it drains, then closes); safe in a signal handler."""
        self._stop_asked += 1
        self.scheduler.stop()


def load_house(path: Path, house: str | None = None, *, freeze: bool = False, **options: Any) -> House:
    """Load a flow file and build one of its houses, as a house process starts.

    Parsing and building make hundreds of thousands of objects that live as
    long as the house; the cyclic collector is paused for both (a collection
    in between rescans the whole parsed flow).  With ``freeze`` -- what a
    house process wants, not a test building many houses -- everything
    alive afterwards moves to the collector's permanent generation, so the
    running house never rescans its own structure.
    """
    from flowcast.flow.loader import load_flow

    with gc_paused():
        spec = load_flow(path)
        built = House(spec.house(house), base=path.resolve().parent, **options)
    if freeze:
        gc.freeze()
    return built

