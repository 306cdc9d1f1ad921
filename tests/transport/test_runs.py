"""RUN chunks: whole reliable messages of one stream numbered in a row travel as one chunk (wire.py).

Each message is still its own message: delivered once, in order, each counted against the receiver's
books while held; a lost run comes back as single MSG chunks; a hostile run is refused whole.
"""

from __future__ import annotations

import msgpack
import pytest

from flowcast.transport.reliable import Link, Outgoing
from flowcast.transport.wire import F_JSON, F_UNRELIABLE, MAX_RUN, RUN, ChunkKind, WireError, decode_chunks

from .roadkit import World


def _kinds(body: bytes) -> list[tuple]:
    out = []
    for chunk in decode_chunks(body):
        if chunk.kind == ChunkKind.RUN:
            stream, seq, payloads = chunk.fields
            out.append(("RUN", stream, seq, len(payloads)))
        elif chunk.kind == ChunkKind.MSG:
            out.append(("MSG", *chunk.fields))
    return out


def test_messages_of_a_stream_in_a_row_share_one_chunk_and_others_split_it():
    sender = Link(60_000, lambda *a: None)
    for n in range(5):
        sender.submit(Outgoing(b"a%d" % n, 1), 0.0)
    sender.submit(Outgoing(b"b", 2), 0.0)  # another stream
    sender.submit(Outgoing(b"a5", 1, F_JSON), 0.0)  # other flags
    sender.submit(Outgoing(b"a6", 1, F_JSON), 0.0)
    sender.submit(Outgoing(b"loose", 1, F_UNRELIABLE), 0.0)  # never in a run
    sender.submit(Outgoing(b"a7", 1, F_JSON), 0.0)  # seq 7: after 6, but the loose one broke the run
    body, _ = sender.build()
    assert _kinds(body) == [("RUN", 1, 0, 5), ("MSG", 2, 0), ("RUN", 1, 5, 2), ("MSG", 1, 0), ("MSG", 1, 7)]
    got = []
    receiver = Link(60_000, lambda stream, flags, data: got.append((stream, bytes(data))))
    receiver.handle(body, 0.0)
    assert got == [(1, b"a0"), (1, b"a1"), (1, b"a2"), (1, b"a3"), (1, b"a4"), (2, b"b"), (1, b"a5"), (1, b"a6"), (1, b"loose"), (1, b"a7")]


def test_a_body_of_runs_never_outgrows_max_body():
    for size in (0, 1, 100, 255, 256, 1000):
        sender = Link(1200, lambda *a: None)
        for _ in range(50):
            sender.submit(Outgoing(b"x" * size, 0), 0.0)
        while (built := sender.build()) is not None:
            assert len(built[0]) <= 1200
            sender.sent(0, len(built[0]), built[1], 0.0)
            sender.inflight.clear()
            sender.inflight_bytes = 0


def test_a_run_that_overlaps_held_messages_delivers_each_once_and_frees_the_books():
    got = []
    receiver = Link(60_000, lambda stream, flags, data: got.append(bytes(data)))
    sender = Link(60_000, lambda *a: None)
    outs = [sender.submit(Outgoing(b"m%d" % n, 0), 0.0) for n in range(6)]
    body, _ = sender.build()
    (run,) = decode_chunks(body)
    # m2 and m4 arrived before, alone (a resend that overtook the run): they are held
    from flowcast.transport.wire import MSG

    for n in (2, 4):
        receiver.handle(MSG.pack(ChunkKind.MSG, 0, 0, n, 2) + b"m%d" % n, 0.0)
    assert got == [] and receiver.buffered > 0
    receiver.handle(body, 0.0)
    assert got == [b"m%d" % n for n in range(6)]
    assert receiver.buffered == 0 and receiver.counts["duplicates"] == 2
    assert len(outs) == len(run.fields[2])


def test_a_lost_run_comes_back_and_every_message_arrives_once_in_order():
    world = World(seed=31, delay=0.005)
    alpha, beta = world.pair()
    world.net.link("alpha", "beta", both=False, loss=0.3)
    outs = [alpha.send_bytes(b"n%d" % n, "beta", timeout=None) for n in range(2000)]
    assert world.run_until(lambda: all(o.state == "delivered" for o in outs), 60)
    assert [m.data for m in beta.receive_many()] == [b"n%d" % n for n in range(2000)]
    assert alpha.remote("beta").session.link.counts["resent"] > 0


@pytest.mark.parametrize(
    "payloads, count, seq, flags",
    [
        ([b"a", b"b"], 3, 0, 0),  # fewer than it says
        ([b"a", "b"], 2, 0, 0),  # a str is no payload
        ([b"a", [b"b"]], 2, 0, 0),  # nor a list
        ([b"a"], 1, 0, 0),  # a run is two at least
        ([b"a", b"b"], 2, 0, F_UNRELIABLE),  # runs are reliable
        ([b"a", b"b", b"c"], 3, (1 << 64) - 2, 0),  # numbers past u64
        ([b"x"] * (MAX_RUN + 1), MAX_RUN + 1, 0, 0),  # longer than any sender makes
    ],
)
def test_a_hostile_run_is_refused_whole_and_delivers_nothing(payloads, count, seq, flags):
    got = []
    receiver = Link(1 << 20, lambda stream, flags, data: got.append(data), adopt=True)
    block = msgpack.packb(payloads)
    body = RUN.pack(ChunkKind.RUN, flags, 0, seq, count, len(block)) + block
    with pytest.raises(WireError):
        receiver.handle(body, 0.0)
    assert got == []


def test_a_run_stops_at_max_run_and_the_next_one_goes_on():
    sender = Link(60_000, lambda *a: None)
    for n in range(5000):
        sender.submit(Outgoing(bytes([n % 256]), 0), 0.0)
    body, _ = sender.build()
    kinds = _kinds(body)
    assert kinds[:2] == [("RUN", 0, 0, MAX_RUN), ("RUN", 0, MAX_RUN, 5000 - MAX_RUN)]
    got = []
    Link(60_000, lambda stream, flags, data: got.append(data)).handle(body, 0.0)
    assert got == [bytes([n % 256]) for n in range(5000)]


def test_empty_messages_close_the_receive_window_like_any_other():
    """Each inbox entry counts INBOX_ENTRY bytes beside its payload, so empty messages held in the inbox
    close the receive window.  Counted as nothing, they never closed it: a sender could pile up any
    number in a receiver that takes none (2-3 bytes each on the wire in a RUN)."""
    world = World(seed=41, delay=0.001)
    alpha, beta = world.pair(receive_window=64 << 10)
    outs = [alpha.send_bytes(b"", "beta", timeout=None) for _ in range(100_000)]
    world.run_for(5.0)
    held = len(beta.inbox)
    # about the first window's worth of wire bytes (2 a message), and nothing after it closed
    assert 0 < held < 64 << 10
    assert sum(o.state == "delivered" for o in outs) == held
    got: list = []
    for _ in range(200):  # bounded: each round takes what arrived and lets the window open again
        got += beta.receive_many()
        if len(got) == len(outs):
            break
        world.run_for(0.05)
    assert len(got) == 100_000 and all(m.data == b"" for m in got)
