"""An in-memory stand-in for flowcast.cast.cache.Cache, with exactly its API (docs/cast.md).

The subscription protocol is tested against this until the SQLite cache
lands; tickets complete on the scheduler (not inside ``publish``), as the
real cache completes them on the house thread once durable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from flowcast.cast.wire import matches, split_takes


class CacheFull(Exception):
    pass


@dataclass
class Stored:
    seq: int
    id: bytes
    name: str
    publisher: str
    stamp: float
    expires: float
    recipients: Any
    size: int
    data: Any


class Ticket:
    def __init__(self) -> None:
        self.done = False
        self.seq = 0
        self.duplicate = False
        self.error: BaseException | None = None


class Cache:
    def __init__(self, estate: str, clock, retention: float, max_bytes: int, scheduler=None) -> None:
        self.estate, self.clock, self.retention, self.max_bytes = estate, clock, retention, max_bytes
        self.scheduler = scheduler
        self.rows: dict[int, Stored] = {}
        self.ids: dict[bytes, tuple[int, float]] = {}
        self.high = 0
        self.bytes = 0
        self.publishes = 0
        self.reads = 0

    @classmethod
    def open(cls, path, *, estate: str, clock, retention: float = 86400.0, max_bytes: int = 1 << 30, scheduler=None) -> "Cache":
        return cls(estate, clock, retention, max_bytes, scheduler)

    def publish(self, name, data, id=None, publisher="", recipients=None) -> Ticket:
        ticket = Ticket()
        self.publishes += 1
        id = id if id is not None else os.urandom(16)
        known = self.ids.get(id)
        if known is not None:
            ticket.seq, ticket.duplicate = known[0], True
        else:
            size = len(data) if isinstance(data, (bytes, str)) else 64
            if self.bytes + size > self.max_bytes:
                ticket.error = CacheFull(f"cache of {self.estate} is full ({self.bytes} of {self.max_bytes} bytes)")
            else:
                self.high += 1
                now = self.clock()
                self.rows[self.high] = Stored(self.high, id, name, publisher, now, now + self.retention, recipients, size, data)
                self.ids[id] = (self.high, now + self.retention + 600)
                self.bytes += size
                ticket.seq = self.high
        if self.scheduler is None:
            ticket.done = True
        else:
            self.scheduler.call_later(0.0, setattr, ticket, "done", True)
        return ticket

    def read(self, after_seq, pattern=None, split=None, limit=1000, max_bytes=256 << 10) -> list[Stored]:
        self.reads += 1
        out, size = [], 0
        for seq in range(max(after_seq + 1, self.low_seq()), self.high + 1):
            row = self.rows.get(seq)
            if row is None or (pattern is not None and not matches(row.name, pattern)):
                continue
            if split is not None and not split_takes(split, row.id, row.name, row.publisher):
                continue
            if out and size + row.size > max_bytes:
                break
            out.append(row)
            size += row.size
            if len(out) >= limit:
                break
        return out

    def low_seq(self) -> int:
        return min(self.rows) if self.rows else self.high + 1

    def stats(self) -> dict[str, Any]:
        oldest = min((r.stamp for r in self.rows.values()), default=None)
        return {"messages": len(self.rows), "bytes": self.bytes, "oldest": oldest, "low_seq": self.low_seq(), "high_seq": self.high}

    def expire(self) -> None:
        now = self.clock()
        for seq in [s for s, r in self.rows.items() if r.expires <= now]:
            self.bytes -= self.rows.pop(seq).size
        for id in [i for i, (_s, until) in self.ids.items() if until <= now]:
            del self.ids[id]

    def close(self) -> None:
        pass
