"""Telemetry fan-in example: sensors on field estates, an aggregator at the hub.

Loaded by ``flows/telemetry-field.flo`` and ``flows/telemetry-hub.flo``
(layouts ``houses/telemetry-hub.yaml``, ``-north.yaml``, ``-south.yaml``)::

    do telemetry road with estate "telemetry-hub" to .telemetry.hub
    do telemetry sensor with every 0.5 to .telemetry.reading
    do telemetry aggregate with inbox "telemetry.inbox" to .telemetry.stats

A sensor house is not the manor, so it has no road and no presence share of
its own: ``telemetry road`` asks the manor for its presence share with a
routed ``read`` (lane traffic, trusted) until the hub is there.  Readings
then go out with the stock ``route send``: a value share, sent each time it
changes, lands in the hub's queue share as a whole message, whose route
names the sending estate and yard.
"""

from __future__ import annotations

import math
import zlib
from typing import Any

from flowcast.behaving import Io, behaviour
from flowcast.routing import Route, presence_share


def _router(io: Io) -> Any:
    router = getattr(io.house, "router", None)
    if router is None:
        raise ValueError("telemetry behaviours run in a house started from an estate layout (no router here)")
    return router


def short(estate: str) -> str:
    """``telemetry-north`` -> ``north``: what the summary lines call an estate."""
    return estate.partition("-")[2] or estate


@behaviour("telemetry.road")
class RoadWatch:
    """Set the output's ``up`` once road ``channel`` of this estate knows ``estate``.

    Every ``every`` seconds it sends a ``read`` of the manor's presence share
    (``flowcast.road.CHANNEL.presence@MANOR``); the router answers into the
    output share, whose fields become ``{estate: presence}``.  ``up`` is set
    when ``estate`` is ``alive`` there -- or at once when ``estate`` is this
    estate (no road needed).
    """

    def __init__(self, io: Io, estate: str, manor: str = "manor", channel: str = "main", every: float = 0.5) -> None:
        if io.output is None:
            raise ValueError("telemetry road needs an output share: 'do telemetry road ... to SHARE'")
        self.io = io
        self.estate = estate
        self.ask = Route.make(presence_share(channel), yard=manor)
        self.every = every
        self.asked: float | None = None

    def __call__(self) -> None:
        io, share = self.io, self.io.output
        if share.get("up"):
            return
        router = _router(io)
        if router.estate == self.estate or share.get(self.estate) == "alive":
            share.update(up=True)
            return
        if self.asked is None or io.now - self.asked >= self.every:
            self.asked = io.now
            router.send(self.ask, None, src=share.name, tag="read")


@behaviour("telemetry.sensor")
class Sensor:
    """Write a reading to the output share every ``every`` seconds.

    Fields ``seq`` (1, 2, ...), ``value`` (a sine of flow time with a period
    of ``wave`` seconds, its phase taken from this house's estate and yard,
    so every sensor differs but repeats run alike) and ``t`` (flow time).
    The sequence number lets the hub see gaps.
    """

    def __init__(self, io: Io, every: float = 0.5, wave: float = 10.0) -> None:
        if io.output is None:
            raise ValueError("telemetry sensor needs an output share: 'do telemetry sensor to SHARE'")
        self.io = io
        self.every = every
        self.wave = wave
        self.seq = 0
        self.last: float | None = None
        self.phase: float | None = None

    def __call__(self) -> None:
        io = self.io
        now = io.now
        if self.last is not None and now - self.last < self.every - 1e-9:
            return
        if self.phase is None:
            router = _router(io)
            self.phase = zlib.crc32(f"{router.estate}/{router.yard}".encode()) % 360 * math.pi / 180
        self.last = now
        self.seq += 1
        value = math.sin(2 * math.pi * now / self.wave + self.phase)
        io.output.update(seq=self.seq, value=round(value, 4), t=round(now, 3))


@behaviour("telemetry.aggregate")
class Aggregate:
    """Drain the queue share ``inbox`` and keep per-sensor statistics.

    The queue is created here, when the flow is built, so readings that
    arrive before the first tick are kept (the router lands a message only
    in a share that exists).  For each sending ``(estate, yard)`` -- read
    from the message's source route -- the output share gets a field
    ``"north/sensor1": {n, seq, last, mean}``; every ``every`` seconds one
    line per sensor is printed::

        hub: north/sensor1 n=12 seq=12 last=0.5878 mean=0.2316
    """

    def __init__(self, io: Io, inbox: str = "telemetry.inbox", every: float = 1.0, label: str = "hub", bound: int = 10000) -> None:
        if io.output is None:
            raise ValueError("telemetry aggregate needs an output share: 'do telemetry aggregate ... to SHARE'")
        self.io = io
        self.inbox = io.store.queue(inbox, bound)
        self.every = every
        self.label = label
        self.sums: dict[str, float] = {}
        self.printed: float | None = None

    def __call__(self) -> None:
        io, queue = self.io, self.inbox.queue
        changed: dict[str, Any] = {}
        while queue:
            message = queue.popleft()
            try:
                _share, yard, estate, _channel = message["route"]["src"]
                seq, value = int(message["data"]["seq"]), float(message["data"]["value"])
            except (KeyError, TypeError, ValueError):
                continue  # not a reading: nothing to count
            key = f"{short(estate)}/{yard}"
            stats = dict(changed.get(key) or io.output.get(key) or {"n": 0})
            stats["n"] += 1
            self.sums[key] = self.sums.get(key, 0.0) + value
            stats.update(seq=seq, last=value, mean=round(self.sums[key] / stats["n"], 4))
            changed[key] = stats
        if changed:
            io.output.update(changed)
        if self.printed is None or io.now - self.printed >= self.every - 1e-9:
            self.printed = io.now
            for key in sorted(io.output.keys()):
                stats = io.output.get(key)
                if isinstance(stats, dict):
                    print(
                        f"{self.label}: {key} n={stats['n']} seq={stats['seq']} last={stats['last']:.4f} mean={stats['mean']:.4f}",
                        flush=True,
                    )
