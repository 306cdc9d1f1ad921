"""An in-memory stand-in for flowcast.cast.cache.Cache with the API the subscription side uses.

The protocol is tested against this until the SQLite cache lands (the
integrator switches the kit to the real one).  It keeps the real cache's
shapes: ``Read`` with ``upto`` (a read scans a bounded number of rows, so
an empty read may still move on), ``Stored`` tuples, ``high_seq`` and
``low_seq`` properties, tickets that complete on the scheduler (not inside
``publish``) and call their ``add_done`` callbacks there, and expiry every
``expire_every`` seconds of the scheduler's clock.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

from flowcast.cast.wire import matches, split_takes


class CacheError(Exception):
    def __init__(self, message: str, reason: str = "io_error") -> None:
        super().__init__(message)
        self.reason = reason


class CacheFull(CacheError):
    def __init__(self, message: str) -> None:
        super().__init__(message, "cache_full")


class Stored(NamedTuple):
    seq: int
    id: bytes
    name: str
    publisher: str
    stamp: float
    recipients: tuple[str, ...] | None
    data: bytes


class Read(list):
    upto: int = 0


class Ticket:
    def __init__(self, id: bytes = b"") -> None:
        self.id = id
        self.done = False
        self.seq = 0
        self.duplicate = False
        self.error: BaseException | None = None
        self._callbacks: list = []

    def add_done(self, callback) -> None:
        if self.done:
            callback(self)
        else:
            self._callbacks.append(callback)

    def _complete(self) -> None:
        self.done = True
        for callback in self._callbacks:
            callback(self)


class Cache:
    def __init__(self, estate: str, clock, retention: float, max_bytes: int, scheduler=None, expire_every: float = 60.0) -> None:
        self.estate, self.clock, self.retention, self.max_bytes = estate, clock, retention, max_bytes
        self.scheduler = scheduler
        self.rows: dict[int, tuple[Stored, float, int]] = {}  # seq -> (stored, expires, size)
        self.ids: dict[bytes, tuple[int, float]] = {}
        self.high = 0
        self.bytes = 0
        self.publishes = 0
        self.expire_every = expire_every
        if scheduler is not None:
            scheduler.call_later(expire_every, self._expire_tick)

    @classmethod
    def open(cls, path, *, estate: str, clock, retention: float = 86400.0, max_bytes: int = 1 << 30, scheduler=None) -> "Cache":
        return cls(estate, clock, retention, max_bytes, scheduler)

    def publish(self, name, data, id=None, publisher="", recipients=None) -> Ticket:
        if not isinstance(data, bytes):
            raise CacheError(f"a message's data is bytes, got {type(data).__name__}", "bad_data")
        self.publishes += 1
        id = id if id is not None else os.urandom(16)
        ticket = Ticket(id)
        known = self.ids.get(id)
        if known is not None:
            ticket.seq, ticket.duplicate = known[0], True
        else:
            size = len(data) + len(name) + 16
            if self.bytes + size > self.max_bytes:
                ticket.error = CacheFull(f"cache of {self.estate} is full ({self.bytes} of {self.max_bytes} bytes)")
            else:
                self.high += 1
                now = self.clock()
                people = tuple(recipients) if recipients else None
                self.rows[self.high] = (Stored(self.high, id, name, publisher, now, people, data), now + self.retention, size)
                self.ids[id] = (self.high, now + self.retention + 600)
                self.bytes += size
                ticket.seq = self.high
        if self.scheduler is None:
            ticket._complete()
        else:
            self.scheduler.call_later(0.0, ticket._complete)
        return ticket

    def read(self, after, pattern=None, split=None, limit=1000, max_bytes=256 << 10, to=None) -> Read:
        out, size = Read(), 0
        out.upto = position = after
        scan_left = max(limit * 8, 256)  # bounded, as the real cache's scan is
        for seq in range(max(after + 1, self.low_seq), self.high + 1):
            if scan_left <= 0:
                break
            scan_left -= 1
            found = self.rows.get(seq)
            position = seq
            if found is None:
                continue
            row = found[0]
            if pattern is not None and not matches(row.name, pattern):
                continue
            if split is not None and not split_takes(split, row.id, row.name, row.publisher):
                continue
            if to is not None and row.recipients is not None and to not in {r.rpartition("@")[2] for r in row.recipients}:
                continue
            weight = len(row.data) + len(row.name)
            if out and (len(out) >= limit or size + weight > max_bytes):
                out.upto = seq - 1
                return out
            out.append(row)
            size += weight
        out.upto = position
        return out

    @property
    def high_seq(self) -> int:
        return self.high

    @property
    def low_seq(self) -> int:
        return next(iter(self.rows), self.high + 1)  # rows are kept in seq order; expiry takes the oldest

    def stats(self) -> dict[str, Any]:
        oldest = min((r[0].stamp for r in self.rows.values()), default=None)
        return {"messages": len(self.rows), "bytes": self.bytes, "oldest": oldest, "low_seq": self.low_seq, "high_seq": self.high}

    def _expire_tick(self) -> None:
        self.expire()
        self.scheduler.call_later(self.expire_every, self._expire_tick)

    def expire(self) -> None:
        now = self.clock()
        for seq in [s for s, r in self.rows.items() if r[1] <= now]:
            self.bytes -= self.rows.pop(seq)[2]
        for id in [i for i, (_s, until) in self.ids.items() if until <= now]:
            del self.ids[id]

    def close(self) -> None:
        pass
