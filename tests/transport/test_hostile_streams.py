"""Issue 25, finding 6: an accepted peer naming every stream.

Was a finding: 65,536 streams per session held 13.5 MB outside the hold
budget (117 MB for 10 sessions), and every ACK sorted them all, so a PING
cost about 1 ms instead of 7-10 us.  Now a stream's state is books inside
the budget (a peer past its share is refused its next new stream, counted),
and an ACK takes the next streams of a rotation, whatever their number.
"""

from __future__ import annotations

import gc
import tracemalloc

from flowcast.transport.budget import HoldBudget
from flowcast.transport.holding import STREAM_COST
from flowcast.transport.reliable import Link
from flowcast.transport.wire import ACK, ACK_STREAM, MAX_ACK_STREAMS, MSG, ChunkKind, WireError
from tests.transport.attacks import inject_sealed
from tests.transport.roadkit import World

ALL_STREAMS = 1 << 16


def _first_messages(streams: range, per_body: int = 512) -> list[bytes]:
    """Message 0 of each stream (delivered at once: what stays is the stream's state alone)."""
    out = []
    for start in range(streams.start, streams.stop, per_body):
        out.append(b"".join(MSG.pack(ChunkKind.MSG, 0, s, 0, 1) + b"x" for s in range(start, min(start + per_body, streams.stop))))
    return out


def test_stream_states_are_counted_in_the_budget_and_a_peer_past_its_share_is_refused_new_ones():
    budget = HoldBudget(4 << 20)
    attacker = Link(60_000, lambda *a: None, budget=budget)
    honest = Link(60_000, lambda *a: None, budget=budget)
    idle = Link(60_000, lambda *a: None, budget=budget)
    refused = 0
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for body in _first_messages(range(ALL_STREAMS)):
            try:
                attacker.handle(body, 0.0)
            except WireError:
                refused += 1  # the packet stays unacknowledged: an honest sender would resend it
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    held = len(attacker.streams_in)
    assert 1_000 < held < ALL_STREAMS // 2, held  # it named them all; it holds what its share allows
    assert attacker.books == held * STREAM_COST
    assert budget.used == attacker.books <= budget.soft
    assert refused > 0 and attacker.counts["refused"] == refused and budget.counts["refused"] > 0
    # what the books say is what the states take (tracemalloc: the stream table and the rotation included)
    assert abs(grown - attacker.books) <= 0.1 * attacker.books, (grown, attacker.books)
    # the others' floors are intact: the honest peer gets its own streams and a large message
    delivered: list[int] = []
    honest.deliver = lambda stream, flags, data: delivered.append(len(data))
    for body in _first_messages(range(200)):
        honest.handle(body, 0.0)
    assert len(delivered) == 200 and idle.books == 0


def _ack_cost(streams: int) -> tuple[int, int, bytes]:
    """(tracemalloc peak while one ACK is built, the ACK's length, the ACK) for a link that heard ``streams`` streams."""
    link = Link(60_000, lambda *a: None, budget=HoldBudget(1 << 30))
    for body in _first_messages(range(streams)):
        link.handle(body, 0.0)
    link.received(0)
    link.received(5)  # two ranges: not the one-range, one-stream shortcut
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        ack = link._ack_chunk()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak, len(ack), ack


def test_an_ack_costs_the_same_with_65536_streams_as_with_100():
    few, few_len, _ = _ack_cost(100)
    many, many_len, _ = _ack_cost(ALL_STREAMS)
    assert few_len == many_len  # MAX_ACK_STREAMS streams either way
    # sorting 65,536 streams allocated their list (half a MB) on every ACK
    assert many < 4 * few + 4_096, (few, many)


def test_the_rotation_reports_every_stream_in_turn():
    streams = 1_000
    link = Link(60_000, lambda *a: None)
    for body in _first_messages(range(streams)):
        link.handle(body, 0.0)
    seen: dict[int, int] = {}
    rounds = -(-streams // MAX_ACK_STREAMS)
    for _ in range(rounds):
        link.received(0)
        link.received(5)
        ack = link._ack_chunk()
        _, _, nranges, nstreams, _ = ACK.unpack_from(ack, 0)
        off = ACK.size + 16 * nranges
        for _ in range(nstreams):
            stream, expected = ACK_STREAM.unpack_from(ack, off)
            off += ACK_STREAM.size
            assert expected == 1
            seen[stream] = seen.get(stream, 0) + 1
    assert set(seen) == set(range(streams))  # every stream within len/64 ACKs


def test_a_joined_estate_naming_every_stream_is_bounded_and_the_honest_peer_keeps_working():
    world = World(seed=2525, delay=0.0005)
    options = dict(hold_budget=4 << 20)
    beta = world.estate("beta", **options)
    alpha = world.estate("alpha", **options)
    mallory = world.estate("mallory", **options)
    for stack in (alpha, mallory):
        stack.join("beta")
    assert world.run_until(lambda: alpha.is_allowed("beta") and mallory.is_allowed("beta") and len(beta.remotes) == 2, 20)
    body_size = beta.datagram_size - 64
    per = body_size // (MSG.size + 1) - 1
    for body in _first_messages(range(ALL_STREAMS), per):
        inject_sealed(mallory, "beta", body)
        world.run_for(0.001)
    world.run_for(0.5)
    beta.receive_many()
    link = beta.remote("mallory").session.link
    budget = beta.hold_budget
    assert link.books >= len(link.streams_in) * STREAM_COST
    assert budget.used <= budget.soft and len(link.streams_in) < ALL_STREAMS // 2
    assert link.counts["refused"] > 0
    out = alpha.send_bytes(b"ping" * 100, "beta", timeout=10.0)
    assert world.run_until(lambda: out.done, 5) and out.delivered
    assert beta.counts["internal_errors"] == 0
