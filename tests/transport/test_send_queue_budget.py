"""A live session's send queue is bounded in bytes (issue 25, finding 4, first half).

Only the no-session backlog had a bound: to a remote with a session, a
flow could queue without limit while the remote read slowly or kept its
window shut.  Now what waits for one remote's session (queued, in flight,
not yet reported delivered) is bounded by ``send_queue_bytes``; a message
past it fails at once with ``send queue full``, counted, so its sender
hears.  Each test failed before the bound existed.
"""

from __future__ import annotations

import pytest

from flowcast.transport.road import SEND_QUEUE_FULL
from flowcast.transport.roadsend import DEFAULT_SEND_QUEUE_BYTES
from tests.transport.roadkit import World


def _pair(**options):
    world = World(seed=41)
    alpha, beta = world.pair(**options)
    return world, alpha, beta


@pytest.mark.parametrize("size", [500, 20_000])  # sent whole (the small path), and in segments
def test_a_live_sessions_queue_stops_at_its_bytes_and_reopens_once_delivered(size):
    world, alpha, beta = _pair(send_queue_bytes=100_000)
    failed = []
    beta.hooks.add("done", lambda msg: failed.append(msg) if msg.failed else None)
    outs = [beta.send_bytes(bytes([n % 256]) * size, "alpha") for n in range(400)]
    fits = 100_000 // size
    assert [o.state for o in outs[:fits]] == ["queued"] * fits
    assert all(o.failed and o.reason == SEND_QUEUE_FULL for o in outs[fits:])
    assert failed == outs[fits:] and beta.counts["send_queue_full"] == 400 - fits
    link = beta.remote("alpha").session.link
    assert link.pending_bytes == fits * size
    assert world.run_until(lambda: link.pending_count == 0, 20)
    assert link.pending_bytes == 0  # the books come back to nothing: delivered bytes are let go
    again = beta.send_bytes(b"z" * size, "alpha")
    assert again.state == "queued"


def test_one_message_alone_goes_whatever_its_size():
    world, alpha, beta = _pair(send_queue_bytes=1 << 16)
    big = beta.send_bytes(b"b" * 300_000, "alpha")
    assert big.state == "queued"
    refused = beta.send_bytes(b"s", "alpha")
    assert refused.failed and refused.reason == SEND_QUEUE_FULL
    assert world.run_until(lambda: big.delivered, 20)


def test_a_receiver_that_never_reads_cannot_grow_its_senders_queue():
    """The remote's window stays shut (its application takes nothing): the sender's books stop at the budget."""
    world, alpha, beta = _pair(send_queue_bytes=200_000, receive_window=1 << 16)
    sent = []
    for _ in range(20):  # a flow sending on, round after round
        sent += [beta.send_bytes(b"m" * 1000, "alpha", timeout=None) for _ in range(50)]
        world.run_for(0.5)
    link = beta.remote("alpha").session.link
    waiting = [o for o in sent if o.pending]
    assert link.pending_bytes == 1000 * len(waiting) <= 200_000
    assert sum(o.reason == SEND_QUEUE_FULL for o in sent) == 1000 - len(waiting) - sum(o.delivered for o in sent) > 0
    assert beta.send_queue_bytes == 200_000 and DEFAULT_SEND_QUEUE_BYTES == 64 << 20


def test_send_queue_bytes_must_be_positive():
    world = World(seed=1)
    with pytest.raises(ValueError):
        world.estate("alpha", send_queue_bytes=0)
