"""Behaviours for the kill -9 hand-off tests (loaded by generated flows).

``handoffplay.feed`` pushes ``per_tick`` numbered items into its output
queue each tick, up to ``count``: a live stream for ``cast publish``.
``handoffplay.apply`` is the application under test: for each CAST
delivery it takes, it records the message in the durable table
``applied`` (id -> n) and counts it in ``totals``, so what it did is in
the same file, and the same transaction, as the acknowledgement.  A
message applied twice would show in ``totals["twice"]``.
"""

from __future__ import annotations

import msgpack

from flowcast.behaving.registry import Io, behaviour


@behaviour("handoffplay.feed")
class Feed:
    def __init__(self, io: Io, count: int = 1000, per_tick: int = 10) -> None:
        self.io = io
        self.count = int(count)
        self.per_tick = int(per_tick)
        self.out = io.store.queue(io.output.name)
        self.next = 0

    def __call__(self) -> None:
        for _ in range(min(self.per_tick, self.count - self.next)):
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
