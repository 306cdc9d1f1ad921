"""Messages that time out together fail in one order, whatever their addresses.

A link keeps the deadlines of messages that expire before one queued
ahead of them in a heap.  Its entries broke ties on ``id(msg)``: two
messages with one deadline (sent in one tick with one timeout, as a stream
does) failed in the order of their memory addresses, so the error replies
that follow a failure came out in an order no seed decides.
"""

from __future__ import annotations

import itertools

import pytest

from flowcast.transport import reliable
from flowcast.transport.reliable import Link, Outgoing


def test_messages_with_one_deadline_fail_in_stream_order_not_address_order(monkeypatch: pytest.MonkeyPatch) -> None:
    # Addresses that fall as objects are made: what an allocator may well do.
    falling = itertools.count()
    monkeypatch.setattr(reliable, "id", lambda obj: -next(falling), raising=False)
    failed: list[bytes] = []
    link = Link(60_000, lambda *a: None, lambda msg: failed.append(msg.data))
    link.submit(Outgoing(b"slow", stream=1, timeout=10.0), 0.0)
    for name in (b"b", b"c", b"d"):
        link.submit(Outgoing(name, stream=1, timeout=1.0), 0.0)  # each earlier than the head: into the heap
    link.submit(Outgoing(b"e", stream=2, timeout=20.0), 0.0)
    link.submit(Outgoing(b"f", stream=2, timeout=1.0), 0.0)
    link.poll(2.0)
    assert failed == [b"b", b"c", b"d", b"f"]
