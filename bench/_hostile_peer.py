"""The victim's peers in bench/hostile.py: one estate per child process, driven over a pipe.

Both the honest peer and each attacker are a house's parts on their own
scheduler and real clock (a router and a road, wired as the estate
launcher wires them), so what they send is what an estate sends: the
attacker differs only in what it chooses to send (bench/_hostile_attacks.py).
The honest peer's round trip is a share ``read`` answered by the victim's
router, which needs no flow of the victim's to run: it measures whether
the victim's house still serves a peer, and nothing else.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import BenchHouse, next_command, run_reported  # noqa: E402

#: A round trip not answered within this long counts as this long (and as lost).
PROBE_TIMEOUT = 5.0


def peer_main(conn: Any, spec: dict[str, Any]) -> None:
    """A child process's main: serve the parent's commands until told to stop.

    The router's notes of errors coming back (an attacker provokes
    thousands) are silenced: they would bury the figures.
    """
    import logging

    logging.getLogger("flowcast").setLevel(logging.CRITICAL)
    run_reported(_peer, conn, spec, spec["estate"])


class Peer:
    """One estate's router and road, and what the parent may ask of them."""

    def __init__(self, conn: Any, spec: dict[str, Any]) -> None:
        from flowcast.routing.wiring import wire_road, wire_router
        from flowcast.runtime import RealClock, Scheduler
        from flowcast.store import Store

        self.conn = conn
        self.spec = spec
        self.estate = spec["estate"]
        self.scheduler = Scheduler(RealClock())
        self.store = Store(self.scheduler.clock.now, name="manor")
        self.house = BenchHouse(self.store, self.scheduler)
        # The victim may write anything here: an attacker does not refuse what it provoked.
        self.router = wire_router(self.house, estate=self.estate, yard="manor", manor="manor",
                                  policy=[{"allow": "any", "estate": "victim"}])
        self.road = wire_road(self.house, "main", keep=spec["keep"], acceptance="always", options=spec.get("road", {}))
        self.attack: Any = None

    def reply(self, *message: Any) -> None:
        self.conn.send(message)

    # -- the honest peer's round trips -------------------------------------------------

    def probe(self, seconds: float, rate: float, pad: int):  # type: ignore[no-untyped-def]
        """Reads of ``probe@.victim`` one at a time, ``rate`` a second at most, for ``seconds``.

        A read carrying ``pad`` bytes is one the road must reassemble (the
        victim's router ignores a read's data), so eviction pressure on the
        victim's hold budget reaches the honest peer's messages too.
        """
        from flowcast.runtime import Event, sleep

        answer = self.store.share("answer")
        arrived = Event()
        answered = [0]

        def landed(share: Any) -> None:
            answered[0] += 1
            arrived.set()

        answer.watchers.append(landed)
        data = b"p" * pad if pad else None
        samples: list[float] = []
        lost = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            arrived.clear()
            before = answered[0]
            sent = time.perf_counter()
            self.router.send("probe@.victim", data, src="answer", tag="read")
            timer = self.scheduler.call_later(PROBE_TIMEOUT, arrived.set)
            yield arrived.wait()
            timer.cancel()
            took = time.perf_counter() - sent
            if answered[0] == before:
                lost += 1
                took = PROBE_TIMEOUT
            samples.append(took)
            gap = 1.0 / rate - took
            if gap > 0:
                yield sleep(gap)
        answer.watchers.clear()
        self.reply("probed", {"samples": samples, "lost": lost})

    # -- joining ---------------------------------------------------------------------

    def wait_allowed(self, host: str, port: int, timeout: float):  # type: ignore[no-untyped-def]
        from flowcast.routing.wiring import join_remote
        from flowcast.runtime import sleep

        join_remote(self.house, "main", host, port)
        end = time.monotonic() + timeout
        while not self.road.is_allowed("victim") and time.monotonic() < end:
            yield sleep(0.01)
        self.reply("allowed", self.road.is_allowed("victim"))

    # -- commands ----------------------------------------------------------------------

    def on_command(self) -> None:
        received = next_command(self.conn, self.scheduler)
        if received is None:
            return
        command, *args = received
        if command == "join":
            self.scheduler.spawn(self.wait_allowed(*args), name="join")
        elif command == "probe":
            self.scheduler.spawn(self.probe(*args), name="probe")
        elif command == "attack":
            from _hostile_attacks import start_attack

            self.attack = start_attack(self, *args)
        elif command == "stop":
            self.scheduler.stop()
        else:
            self.reply("error", f"unknown command {command!r}", "")

    def run(self) -> None:
        self.scheduler.add_reader(self.conn, self.on_command)
        self.reply("ready", self.road.address)
        try:
            self.scheduler.run()
        finally:
            self.house.close()


def _peer(conn: Any, spec: dict[str, Any]) -> None:
    Peer(conn, spec).run()
