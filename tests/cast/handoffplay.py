"""Behaviours for the kill -9 hand-off tests (loaded by generated flows).

``handoffplay.feed`` pushes ``per_tick`` numbered items into its output
queue each tick until told to stop: a live stream for ``cast publish``.
``handoffplay.apply`` is the application under test: for each CAST
delivery it takes, it records the message in the durable table
``applied`` (id -> n) and counts it in ``totals``, so what it did is in
the same file, and the same transaction, as the acknowledgement.  A
message applied twice would show in ``totals["twice"]``.
"""

from __future__ import annotations

import os
import time

import msgpack

from flowcast.behaving.registry import Io, behaviour


@behaviour("handoffplay.feed")
class Feed:
    """``per_tick`` items a tick until the file ``stop`` exists; then the count fed goes into ``fed``
    (the test stops the stream once its kills are done, however fast the machine is)."""

    def __init__(self, io: Io, stop: str, fed: str, per_tick: int = 10) -> None:
        self.io = io
        self.stop = stop
        self.fed = fed
        self.per_tick = int(per_tick)
        self.out = io.store.queue(io.output.name)
        self.next = 0
        self.stopped = False

    def __call__(self) -> None:
        if self.stopped:
            return
        if os.path.exists(self.stop):
            self.stopped = True
            with open(self.fed + ".part", "w") as out:
                out.write(str(self.next))
            os.replace(self.fed + ".part", self.fed)
            return
        for _ in range(self.per_tick):
            self.out.push({"n": self.next})
            self.next += 1


@behaviour("handoffplay.apply")
class Apply:
    def __init__(self, io: Io) -> None:
        self.io = io
        self.inbox = io.store.queue(io.input.name)

    def __call__(self) -> None:
        cast = self.io.house.cast
        applied, totals = cast.table("applied"), cast.table("totals")
        queue = self.inbox.queue
        while queue:
            item = queue.popleft()
            if item["tag"] != "cast":
                totals["other"] = totals.get("other", 0) + 1
                continue
            if item["id"] in applied:
                totals["twice"] = totals.get("twice", 0) + 1
                continue
            applied[item["id"]] = msgpack.unpackb(item["data"])["n"]
            totals["applied"] = totals.get("applied", 0) + 1
            if item["redelivered"]:
                totals["redelivered"] = totals.get("redelivered", 0) + 1


@behaviour("handoffplay.confirm")
class Confirm:
    """Consume-and-publish: for each order, reserve one unit of stock (durable table ``stock``) and
    publish its confirmation ``xyz/confirms/<n>`` in the same turn (``publish(turn=True)``)."""

    def __init__(self, io: Io, estate: str = "xyz", work: float = 0.0) -> None:
        self.io = io
        self.estate = estate
        self.work = float(work)  # seconds of the application's own work after publishing, in the turn
        self.inbox = io.store.queue(io.input.name)

    def __call__(self) -> None:
        cast = self.io.house.cast
        stock, confirmed = cast.table("stock"), cast.table("confirmed")
        queue = self.inbox.queue
        busy = False
        while queue:
            item = queue.popleft()
            if item["tag"] != "cast":
                continue
            n = msgpack.unpackb(item["data"])["n"]
            if item["id"] in confirmed:  # would be a second effect: counted, so the test sees it
                stock["twice"] = stock.get("twice", 0) + 1
                continue
            confirmed[item["id"]] = n
            stock["reserved"] = stock.get("reserved", 0) + 1
            cast.publish(f"{self.estate}/confirms/{n}", msgpack.packb({"n": n}), turn=True)
            busy = True
        if busy and self.work:
            time.sleep(self.work)  # stands for the work an application does in its turn: a kill lands in it
