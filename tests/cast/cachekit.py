"""Helpers for the cache tests: a cache on a virtual clock, and publishing until durable."""

from __future__ import annotations

from pathlib import Path

from flowcast.cast import Cache, Ticket
from flowcast.runtime.clock import VirtualClock

HOUR = 3600.0
DAY = 24 * HOUR


def virtual_cache(tmp_path: Path, **kwargs) -> tuple[Cache, VirtualClock]:
    """A cache of estate abc on a virtual clock, written inline (no thread: deterministic)."""
    clock = kwargs.pop("clock", None) or VirtualClock()
    cache = Cache.open(tmp_path / "cast" / "cache.sqlite3", estate="abc", clock=clock, **kwargs)
    return cache, clock


def publish_now(cache: Cache, name: str, data: bytes, **kwargs) -> Ticket:
    """Publish and wait until durable; the ticket is done."""
    ticket = cache.publish(name, data, **kwargs)
    cache.flush(10.0)
    assert ticket.done
    return ticket


def read_all(cache: Cache, after: int = 0, **kwargs) -> list:
    out = []
    for _ in range(100_000):
        batch = cache.read(after, **kwargs)
        out.extend(batch)
        if batch.upto == after:
            return out
        after = batch.upto
    raise AssertionError("read_all did not reach the end")
