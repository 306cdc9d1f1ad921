"""Run a flow on the virtual clock and collect its transition trace.

This is the trace the differential tests compare with Ioflo's and that
``flowcast run --trace`` prints: one :class:`Transition` per change of a
framer's active frame (and per start), in the order they happen.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from flowcast.flow.builder import build_house
from flowcast.flow.framer import Transition
from flowcast.flow.loader import load_flow
from flowcast.flow.skedder import Skedder, Stamp
from flowcast.runtime import Scheduler, VirtualClock

__all__ = ["Transition", "run_trace"]


def run_trace(
    path: str | Path,
    *,
    period: float = 0.125,
    until: float = 10.0,
    house: str | None = None,
    out: Callable[[str], None] = lambda line: None,
) -> list[Transition]:
    """Load, build and run one house of a flow in simulated time."""
    spec = load_flow(Path(path))
    trace: list[Transition] = []
    stamp = Stamp()
    built = build_house(
        spec.house(house),
        stamp=stamp,
        on_transition=trace.append,
        out=out,
        base=Path(path).resolve().parent,
    )
    skedder = Skedder(built.taskables, period, stamp)
    scheduler = Scheduler(VirtualClock())
    scheduler.spawn(skedder.run(scheduler, until), name=f"skedder:{built.name}")
    scheduler.run()
    return trace
