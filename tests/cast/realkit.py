"""CAST estates on real sockets: one manor house per estate, wired as the estate launcher wires one.

The simulated-network kit (tests/cast/kit.py) proves the protocol on
virtual time; this one puts the same CastService on a real RoadStack (UDP
on 127.0.0.1) and a real clock, so the fault tests exercise the real
transport, the real SQLite cache and the real inbox together.  Used in the
test process and by the child processes of the kill -9 test
(tests/cast/estate_child.py).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from flowcast.cast import Cache, CastConfig, CastService
from flowcast.routing.wiring import wire_road, wire_router
from flowcast.runtime import Scheduler
from flowcast.store import Store

#: abc lets xyz subscribe to everything under abc/; xyz lets abc's deliveries in.
SUBSCRIBE_FROM_XYZ = {"allow": "subscribe", "estate": "xyz", "share": "cast"}
FROM_ABC = {"allow": "write", "estate": "abc", "share": "cast.*"}


class House:
    """What the wiring functions need of a house (flowcast.store.HouseLike), and no flows."""

    def __init__(self, name: str, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.store = Store(scheduler.clock.now, name=name)
        self.router: Any = None
        self.cast: Any = None
        self.causal: Any = None
        self._closers: list[Callable[[], None]] = []

    def on_close(self, closer: Callable[[], None]) -> None:
        self._closers.append(closer)

    def close(self) -> None:
        while self._closers:
            self._closers.pop()()


def manor(estate: str, scheduler: Scheduler, directory: Path, *, port: int = 0, policy=(), cache: bool = False,
          inbox: bool = False, config: CastConfig | None = None, road: dict | None = None) -> House:
    """The manor of ``estate``: router, road ``main`` on 127.0.0.1:``port``, and its CastService in ``house.cast``.

    ``road``: RoadStack options (``datagram_size``: an Internet-sized MTU
    makes a stream many datagrams, so a fault relay has something to hit).
    """
    directory.mkdir(parents=True, exist_ok=True)
    house = House("manor", scheduler)
    router = wire_router(house, estate=estate, yard="manor", manor="manor", policy=list(policy))
    wire_road(house, "main", keep=directory / "keep", port=port, acceptance="always", options=road)
    config = config if config is not None else CastConfig(subscribers={"xyz": ("abc/**",)})
    held = None
    if cache:
        held = Cache.open(directory / "cache.sqlite3", estate=estate, clock=scheduler.clock, scheduler=scheduler)
        house.on_close(held.close)  # closers run newest first: the service closes before its cache
    service = CastService(router, cache=held, config=config, inbox=directory / "inbox.sqlite3" if inbox else None)
    service.attach(house)
    return house


def drain(queue, into: list) -> int:
    """Move the CAST deliveries waiting in ``queue`` (a queue share) into ``into``; how many it holds now."""
    while queue.queue:
        item = queue.queue.popleft()
        if item["tag"] == "cast":
            into.append(item)
    return len(into)


def run_until(scheduler: Scheduler, predicate: Callable[[], Any], timeout: float, step: float = 0.02) -> bool:
    """Run the real-clock scheduler until ``predicate()`` holds or ``timeout`` wall seconds pass."""
    end = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= end:
            return bool(predicate())
        scheduler.run(until=scheduler.clock.now() + step)


def run_for(scheduler: Scheduler, seconds: float, each: Callable[[], Any] = lambda: None) -> None:
    """Run ``seconds`` of wall time, calling ``each()`` between steps (a test draining its queue shares)."""
    run_until(scheduler, lambda: each() and False, seconds)
