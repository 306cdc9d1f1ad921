"""Behaviours for the multi-process routing tests (loaded by generated flows).

``routeplay.send`` sends ``count`` numbered messages to each route in
``dsts`` (space-separated) and writes every error that comes back to
``out`` as a JSON line.  ``routeplay.record`` drains
its input queue into ``out``, one JSON line per landed message, flushed at
once so a test can read it while the house runs (and after a kill -9).
"""

from __future__ import annotations

import json
import os

from flowcast.behaving.registry import Io, behaviour


def _append(path: str, record: dict) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


@behaviour("routeplay.send")
class Send:
    """Once: ``count`` messages ``{"n": i}`` to every route in ``dsts``; errors to ``out``."""

    def __init__(self, io: Io, dsts: str, count: int = 1, out: str = "", tag: str = "n") -> None:
        self.io = io
        self.dsts = dsts.split()
        self.count = count
        self.out = out
        self.tag = tag
        self.started = False
        io.store.queue("play.out")
        self.errors = io.store.queue("play.out.error")  # errors come back here

    def __call__(self) -> None:
        router = self.io.house.router
        if not self.started:
            self.started = True
            for dst in self.dsts:
                for n in range(self.count):
                    router.send(dst, {"n": n}, src="play.out", tag=self.tag)
        queue = self.errors.queue
        while queue:
            message = queue.popleft()
            if self.out:
                _append(self.out, {"error": message["data"], "tag": message["tag"], "src": message["route"]["src"]})


@behaviour("routeplay.record")
class Record:
    """Write every message to ``out`` the moment it lands in the input queue share.

    A watcher, not the act's tick: landing in the share is what the lane
    acknowledges, so the file shows exactly what was delivered to this
    house -- a kill -9 between landing and the next tick loses nothing the
    file does not show.
    """

    def __init__(self, io: Io, out: str) -> None:
        self.share = io.store.queue(io.input.name)  # routed messages land here whole
        self.out = out
        self.share.watchers.append(self._landed)

    def _landed(self, share) -> None:
        queue = share.queue
        while queue:
            message = queue.popleft()
            _append(self.out, {"src": message["route"]["src"], "dst": message["route"]["dst"], "tag": message["tag"], "data": message["data"]})

    def __call__(self) -> None:
        return None


@behaviour("routeplay.stream")
class Stream:
    """``count`` messages ``{"n": i}`` to ``dst``, ``per_tick`` at a time; each the road acknowledged goes to ``acked``.

    Runs in a manor: it watches the road's completions (chained before the
    router's own) to learn which messages the remote estate acknowledged --
    the promise the kill -9 test holds the receiving estate to.
    """

    def __init__(self, io: Io, dst: str, count: int, per_tick: int, acked: str) -> None:
        self.io = io
        self.dst = dst
        self.count = count
        self.per_tick = per_tick
        self.acked = acked
        self.next = 0
        self.hooked = False

    def _hook(self) -> None:
        from flowcast.routing.parcel import open_data, open_header

        road = self.io.house.router.roads["main"]
        path = self.acked

        def on_done(msg) -> None:
            if msg.state == "delivered":
                _append(path, {"n": open_data(msg.data, open_header(msg.data)[4])["n"]})

        road.hooks.add("done", on_done)  # beside the router's own listener
        self.hooked = True

    def __call__(self) -> None:
        if not self.hooked:
            self._hook()
        router = self.io.house.router
        end = min(self.count, self.next + self.per_tick)
        for n in range(self.next, end):
            router.send(self.dst, {"n": n}, src="play.out")
        self.next = end


@behaviour("routeplay.slowstart")
class SlowStart:
    """A setup that blocks the house's start: it registers a closer, says so, then waits.

    The closer appends ``{"closed": pid}`` to ``closed``; ``{"started": pid}``
    goes to ``started`` once the closer is registered.  The wait is in the
    build (where a behaviour that opens a connection would block), bounded
    by ``limit`` seconds.
    """

    def __init__(self, io: Io, started: str, closed: str, limit: float = 60.0) -> None:
        import time

        pid = os.getpid()
        io.house.on_close(lambda: _append(closed, {"closed": pid}))
        _append(started, {"started": pid})
        end = time.monotonic() + limit
        while time.monotonic() < end:
            time.sleep(0.05)

    def __call__(self) -> None:
        return None


@behaviour("routeplay.pour")
class Pour:
    """A steady numbered stream: ``per_tick`` messages ``{"n": i}`` to ``dst`` each tick, ``count`` in all.

    Every number handed to the router goes to ``sent`` (a JSON line per
    tick, written before the next tick), every error report that comes back
    to ``errors`` the moment it lands (a watcher: it runs while the house
    drains, after the framers stopped) -- so a test can tell, after a stop,
    what was sent, and what the sender was told did not arrive.
    """

    def __init__(self, io: Io, dst: str, per_tick: int, sent: str, errors: str, count: int = 10**9) -> None:
        self.io = io
        self.dst = dst
        self.per_tick = per_tick
        self.count = count
        self.sent = sent
        self.errors = errors
        self.next = 0
        io.store.queue("pour.out")
        io.store.queue("pour.out.error").watchers.append(self._error)

    def _error(self, share) -> None:
        queue = share.queue
        while queue:
            message = queue.popleft()
            _append(self.errors, {"error": message["data"], "src": message["route"]["src"]})

    def __call__(self) -> None:
        router = self.io.house.router
        end = min(self.count, self.next + self.per_tick)
        if end <= self.next:
            return
        for n in range(self.next, end):
            router.send(self.dst, {"n": n}, src="pour.out")
        _append(self.sent, {"ns": [self.next, end]})
        self.next = end


@behaviour("routeplay.take")
class Take:
    """Each tick, take what waits in the input queue and write it to ``out`` -- at the flow's pace.

    Unlike ``routeplay.record`` (a watcher, at landing), this is how a flow
    that forwards or publishes what it is sent works (``causal publish``
    takes its source queue on its ticks): what landed since the last tick
    waits in the share, and a stop finds it there.
    """

    def __init__(self, io: Io, out: str) -> None:
        self.share = io.store.queue(io.input.name)
        self.out = out

    def __call__(self) -> None:
        queue = self.share.queue
        taken = []
        while queue:
            taken.append(queue.popleft()["data"]["n"])
        if taken:
            _append(self.out, {"ns": taken})
