"""Edges of the fast send and receive paths: inbox accounting, the send path's cache, RUN parsing,
deliver_through (found by an outside review; each test but the last failed before its fix)."""

from __future__ import annotations

from collections import deque

import msgpack
import pytest

from flowcast.transport import wire
from flowcast.transport.outgoing import Outgoing, deliver_through

from tests.transport.roadkit import World


def test_receive_many_with_no_room_leaves_inbox_bytes_alone():
    """receive_many(limit) with a limit of 0 or less takes nothing, so inbox_bytes (the receive
    window's measure) must not move: a caller computing ``budget - used`` may pass a negative."""
    world = World(seed=3)
    alpha, beta = world.pair()
    alpha.send_bytes(b"hello", "beta")
    assert world.run_until(lambda: len(beta.inbox) == 1, 10)
    before = beta.inbox_bytes
    for _ in range(10):
        assert beta.receive_many(-1) == []
    assert beta.inbox_bytes == before
    assert [m.data for m in beta.receive_many()] == [b"hello"]
    assert beta.inbox_bytes == 0


def test_send_to_none_never_goes_to_the_last_remote():
    """A send whose ``to`` names no remote (None) is refused; it must never reach the remote of an
    earlier send because the send cache was reset to None while keeping that remote."""
    world = World(seed=4)
    alpha, beta = world.pair()
    alpha.send_bytes(b"first", "beta")
    gamma = world.estate("gamma")
    gamma.join("alpha")  # alpha's RemoteTable.add: the cache's _last_to becomes None
    assert world.run_until(lambda: gamma.is_allowed("alpha"), 10)
    with pytest.raises((KeyError, TypeError)):
        alpha.send_bytes(b"stray", None)  # type: ignore[arg-type]
    world.run_for(2.0)
    got = []
    while (m := beta.receive()) is not None:
        got.append(m.data)
    assert got == [b"first"]


def test_run_payloads_refuses_a_truncated_trailing_item():
    """A RUN's array is exactly ``count`` byte strings and nothing else: bytes after the last item,
    even an unfinished item header, refuse the chunk (as the whole-array unpack did)."""
    block = msgpack.packb([b"a", b"b"]) + b"\xc4"  # a bin8 header with no length: out of data
    with pytest.raises(wire.WireError):
        wire.run_payloads(block, 0, 0, 2)


def test_deliver_through_walks_a_queue_with_a_gap():
    """Guard (passes): a queue not numbered in a row is walked, so a message numbered at or past
    ``expected`` is never reported delivered, and a failed one is passed over."""
    msgs = []
    for seq in (0, 1, 3, 4):
        m = Outgoing(b"x")
        m.seq = seq
        msgs.append(m)
    msgs[1].fail("timeout")
    heard = []
    settled = deliver_through(deque(msgs), 4, heard.append)
    assert settled == 2
    assert heard == [msgs[0], msgs[2]]
    assert msgs[3].pending and msgs[1].failed
