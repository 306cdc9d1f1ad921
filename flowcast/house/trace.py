"""Run a flow on the virtual clock and collect its transition trace.

This is the trace the differential tests compare with Ioflo's and that
``flowcast run --trace`` prints: one :class:`Transition` per change of a
framer's active frame (and per start), in the order they happen.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from flowcast.behaving import Registry
from flowcast.flow.framer import Transition
from flowcast.flow.loader import load_flow
from flowcast.house.house import House

__all__ = ["Transition", "run_trace"]


def run_trace(
    path: str | Path,
    *,
    period: float = 0.125,
    until: float = 10.0,
    house: str | None = None,
    registry: Registry | None = None,
    out: Callable[[str], None] = lambda line: None,
) -> list[Transition]:
    """Load, build and run one house of a flow in simulated time.

    ``registry`` replaces the default one (entry points plus the flow's
    ``load`` statements still load into it).
    """
    spec = load_flow(Path(path))
    trace: list[Transition] = []
    built = House(
        spec.house(house),
        period=period,
        virtual=True,
        base=Path(path).resolve().parent,
        registry=registry,
        on_transition=trace.append,
        out=out,
    )
    built.run(until)
    return trace
