"""Link.piece_in (reassembly.py) and the road's quick path that offers it every body, attacked (an outside review's tests).

Two kinds of check:

* end to end, on the simulated network (virtual time, seeded): large messages in 1,232-byte
  datagrams through loss, reordering, duplication and a small hold budget arrive exactly once,
  intact, and nothing stays held or counted; and the same seeded run with ``piece_in`` disabled
  (every body the whole way) ends identically -- deliveries, their times, every count.
* link level, bodies picked for the edges: memoryview/bytearray bodies, a length field that
  disagrees with the body, the last piece at full length, numbers past 256, count 2, evicted
  or expired entries, no budget, adopt=True, stale entries behind ``expected``.
"""

from __future__ import annotations

import random

import pytest

from flowcast.transport import budget as budget_mod
from flowcast.transport.budget import HoldBudget
from flowcast.transport.holding import Partial
from flowcast.transport.reliable import Link
from flowcast.transport.wire import SEG, ChunkKind

from .attacks import offer
from .roadkit import World

PIECE_IN = Link.piece_in


# -- helpers -----------------------------------------------------------------------------------


def _session_books(budget: HoldBudget) -> int:
    """The books of the budget's sessions (stream states, age heap entries): held, never evicted."""
    return sum(link.books for link in (ref() for ref in budget.sessions.values()) if link is not None)


def _seg(stream: int, seq: int, number: int, count: int, piece: bytes, flags: int = 0) -> bytes:
    return SEG.pack(ChunkKind.SEG, flags, stream, seq, number, count, len(piece)) + piece


def _link(budget: HoldBudget | None, delivered: list, **options) -> Link:
    return Link(1_200, lambda stream, flags, data: delivered.append((stream, flags, bytes(data))), budget=budget, **options)


def _books(link: Link, budget: HoldBudget | None) -> tuple:
    streams = {}
    for stream, state in link.streams_in.items():
        held = {}
        for seq, item in state.pending.items():
            if type(item) is Partial:
                held[seq] = ("partial", item.count, item.size, item.waste, item.piece, item.table, item.step,
                             item.grow_at, item.last, {n: bytes(p) for n, p in item.parts.items()})
            else:
                held[seq] = item
        streams[stream] = (state.expected, held)
    return (
        streams,
        {k: (p.size, p.waste, sorted(p.parts)) for k, p in link.partials_unreliable.items()},
        link.buffered,
        None if budget is None else (budget.used, len(budget.holders), dict(budget.counts)),
        [list(r) for r in link.recv_ranges],
        link.ack_pending,
        link.ack_owed,
        link.ack_due,
        link.sweep_at,
        dict(link.evicted_owed or {}),
        dict(link.counts),
    )


def _pair(budget_factory, **options):
    out = []
    for _ in range(2):
        budget = budget_factory()
        delivered: list = []
        out.append((_link(budget, delivered, **options), budget, delivered))
    return out


def _both(bodies, budget_factory=lambda: HoldBudget(1 << 24), *, start=0, now=lambda c: c * 0.001, setup=None, **options):
    """Feed ``bodies`` to a plain link and a piece_in-first link; assert equal books after each."""
    (plain, pb, pd), (quick, qb, qd) = _pair(budget_factory, **options)
    if setup is not None:
        setup(plain, pb)
        setup(quick, qb)
    ways = []
    for counter, body in enumerate(bodies, start):
        expected = offer(plain, body, counter, now(counter), quick=False)
        got = offer(quick, body, counter, now(counter), quick=True)
        ways.append(got)
        assert (got == "refused") == (expected == "refused"), (counter, got, expected)
        assert _books(quick, qb) == _books(plain, pb), counter
        assert qd == pd
    return ways, (plain, pb, pd), (quick, qb, qd)


# -- link level ----------------------------------------------------------------------------------

PIECE = 1_100


def _message(stream, seq, count, rng=random.Random(5)):
    return [_seg(stream, seq, n, count, rng.randbytes(PIECE)) for n in range(count)]


def test_memoryview_and_bytearray_bodies_go_the_whole_way_and_end_alike():
    pieces = _message(0, 0, 6)
    bodies = [pieces[0], memoryview(pieces[1]), bytearray(pieces[2]), pieces[3], memoryview(bytearray(pieces[4])), pieces[5]]
    ways, (plain, pb, pd), _ = _both(bodies)
    assert ways[1] == ways[2] == ways[4] == "handled"
    assert ways[3] == "quick"
    assert len(pd) == 1 and pb.used == plain.books


def test_a_length_field_that_disagrees_with_the_body():
    first, second, third, fourth = _message(0, 0, 4)
    longer = second + b"trailing"  # length says PIECE, the body has more: handle reads the extra as a chunk
    shorter = bytearray(second)
    shorter[-1:] = b""  # length says PIECE, the body is one byte short: overrun
    ping = second + bytes([ChunkKind.PING, 0])  # a SEG then a PING: legal, two chunks
    ways, (plain, _, pd), _ = _both([first, bytes(longer), bytes(shorter), ping, third])
    assert ways[1:] == ["refused", "refused", "handled", "quick"]


def test_the_last_piece_at_full_length_and_count_two():
    # last piece (number count-1) arriving before others, at full length: taken quick, then the
    # completing piece goes the whole way
    a = _message(0, 0, 5)
    b = _message(0, 1, 2)
    c = _message(3, 0, 2)
    bodies = [a[0], a[4], a[2], a[3], a[1], b[1], b[0], c[0], c[0], c[1], c[1]]
    ways, (plain, pb, pd), _ = _both(bodies)
    assert ways[1] == "quick" and ways[2] == "quick" and ways[3] == "quick"
    assert ways[4] == "handled"  # the completing one
    assert ways[5] == ways[6] == "handled"  # count 2: never quick
    assert len(pd) == 3 and pb.used == plain.books


def test_the_last_piece_short_first_then_middles():
    # the last (short) piece first: entry.piece stays 0, so the next piece sets it the whole way
    rng = random.Random(9)
    count = 6
    parts = [_seg(0, 0, n, count, rng.randbytes(PIECE if n < count - 1 else 300)) for n in range(count)]
    ways, (plain, pb, pd), _ = _both([parts[5], parts[2], parts[3], parts[1], parts[4], parts[0]])
    assert ways == ["handled", "handled", "quick", "quick", "quick", "handled"]
    assert len(pd) == 1 and pb.used == plain.books


def test_numbers_past_256_shuffled():
    count = 700
    rng = random.Random(2)
    parts = [_seg(0, 0, n, count, rng.randbytes(PIECE)) for n in range(count)]
    order = list(range(count))
    rng.shuffle(order)
    ways, (plain, pb, pd), _ = _both([parts[i] for i in order], lambda: HoldBudget(1 << 24))
    assert ways.count("quick") > count - 20
    assert len(pd) == 1 and pb.used == plain.books and not pb.holders


def test_a_message_longer_than_the_measured_table_sizes():
    """Past tablesize.MEASURED pieces the dict's size is asked per piece: piece_in must step aside each time."""
    from flowcast.transport.tablesize import MEASURED

    count = MEASURED + 200
    (plain, pb, _), (quick, qb, _) = _pair(lambda: HoldBudget(1 << 26))
    plain._hold_limit = quick._hold_limit = 1 << 26
    ways = []
    payload = bytes(PIECE)
    for number in range(count - 1):  # never the last: nothing completes, everything stays held
        body = _seg(0, 0, number, count, payload)
        offer(plain, body, number, 0.0, quick=False)
        ways.append(offer(quick, body, number, 0.0, quick=True))
        qe, pe = quick.streams_in[0].pending[0], plain.streams_in[0].pending[0]
        assert (qe.size, qe.waste, qe.table, qe.step, qe.grow_at) == (pe.size, pe.waste, pe.table, pe.step, pe.grow_at), number
        assert (quick.buffered, qb.used, quick.recv_ranges, quick.ack_owed) == (plain.buffered, pb.used, plain.recv_ranges, plain.ack_owed)
    assert ways[-150:].count("quick") == 0  # each piece past MEASURED asks sys.getsizeof: the whole way
    assert ways.count("quick") > MEASURED - 40
    assert _books(quick, qb) == _books(plain, pb)


def test_no_budget_adopt_and_no_acks():
    parts = _message(1, 7, 40)
    for options in ({}, {"adopt": True}, {"acks": False}):
        ways, (plain, _, pd), _ = _both([parts[0], *parts[6:], *parts[1:6]], lambda: None, **options)
        assert ways.count("quick") > 30, options
        # seq 7 on a fresh stream: a lane (adopt) starts there and delivers; otherwise it is held whole
        assert (len(pd) == 1) == bool(options.get("adopt"))


def test_an_evicted_or_expired_entry_between_pieces():
    parts = _message(0, 0, 30)
    other = _message(0, 1, 30)
    budget_box = {}

    def evict_at(index, how):
        def now(counter):
            return counter * 0.001
        bodies = parts[:index] + other[:3] + parts[index:] + other[3:]
        (plain, pb, pd), (quick, qb, qd) = _pair(lambda: HoldBudget(1 << 20, incomplete_after=1.0))
        for counter, body in enumerate(bodies):
            if counter == index + 3:
                for link, budget in ((plain, pb), (quick, qb)):
                    if how == "evict":
                        budget_mod.evict(link, 1)
                    else:
                        link_now = 100.0
                        budget_mod.expire(link, link_now)
            expected = offer(plain, body, counter, now(counter), quick=False)
            got = offer(quick, body, counter, now(counter), quick=True)
            assert (got == "refused") == (expected == "refused")
            assert _books(quick, qb) == _books(plain, pb), (how, counter)
        budget_box[how] = (plain, pb, pd)

    evict_at(10, "evict")
    evict_at(10, "expire")


def test_a_stale_partial_behind_expected_is_not_taken():
    # should a Partial ever sit at a seq the stream has moved past, piece_in must leave it to handle
    parts = _message(0, 3, 10)

    def setup(link, budget):
        for number in (0, 1):
            link.handle(parts[number], 0.0)
        link.streams_in[0].expected = 5  # as if the stream had moved past seq 3 (no path does today)

    ways, _, _ = _both([parts[4]], setup=setup)
    assert ways == ["handled"]


@pytest.mark.parametrize("seed", range(4))
def test_random_hostile_mixes_with_views_and_edges(seed):
    rng = random.Random(100 + seed)
    bodies = []
    messages = [(stream, seq, rng.choice([2, 3, 4, 30, 260, 300])) for seq in range(5) for stream in (0, 1)]
    for stream, seq, count in messages:
        for number in rng.sample(range(count), count):
            size = PIECE if number < count - 1 else rng.choice([PIECE, 200])
            body = _seg(stream, seq, number, count, rng.randbytes(size))
            roll = rng.random()
            if roll < 0.03:
                body = memoryview(body)
            elif roll < 0.05:
                body = bytearray(body)
            elif roll < 0.07:
                body = body + bytes([ChunkKind.PING, 0])
            elif roll < 0.09:
                bodies.append(_seg(stream, seq, number, count, rng.randbytes(PIECE))[:-3] + b"\x00\x00\x00")
            bodies.append(body)
            if rng.random() < 0.05:
                bodies.append(body)
    ways, (_, pb, pd), (_, qb, qd) = _both(bodies, lambda: HoldBudget(400_000))
    assert ways.count("quick") > 100 and "refused" in ways


# -- end to end ----------------------------------------------------------------------------------


def _run(seed: int, *, quick: bool, sizes, budget: int = 256 << 20, streams=(0,), conditions=None, limit=600.0, hook=None, **stack_options):
    """alpha sends ``sizes`` to beta (streams in turn); everything observable at the end."""
    taken = [0]
    if quick:
        def counting(self, body, counter, now):
            ok = PIECE_IN(self, body, counter, now)
            taken[0] += ok
            return ok
        Link.piece_in = counting
    else:
        Link.piece_in = lambda self, body, counter, now: False
    try:
        world = World(seed=seed, delay=(0.0005, 0.002))
        alpha, beta = world.pair(datagram_size=1232, hold_budget=budget, **stack_options)
        if conditions:
            world.net.link("alpha", "beta", both=False, **conditions)
        if hook is not None:
            hook(world, alpha, beta)
        rng = random.Random(seed)
        payloads = [rng.randbytes(size) for size in sizes]
        outs = [alpha.send_bytes(p, "beta", stream=streams[i % len(streams)], timeout=None) for i, p in enumerate(payloads)]
        got: list = []

        def done():
            got.extend((world.scheduler.clock.now(), m.stream, m.data) for m in beta.receive_many())
            return all(o.done for o in outs) and len(got) >= len(payloads)

        finished = world.run_until(done, limit)
        world.run_for(0.5)
        got.extend((world.scheduler.clock.now(), m.stream, m.data) for m in beta.receive_many())
        link = beta.remote("alpha").session.link
        return dict(
            finished=finished,
            payloads=payloads,
            got=got,
            states=[o.state for o in outs],
            buffered=link.buffered,
            used=beta.hold_budget.used - link.books,  # what is held beyond the books (streams, age heap)
            holders=len(beta.hold_budget.holders),
            beta_counts=dict(beta.counts),
            link_counts=dict(link.counts),
            alpha_counts=dict(alpha.remote("beta").session.link.counts),
            net=dict(world.net.counts),
            taken=taken[0],
            now=world.scheduler.clock.now(),
        )
    finally:
        Link.piece_in = PIECE_IN


def _check_exact(result, streams=(0,)):
    assert result["finished"]
    payloads = result["payloads"]
    by_stream = {s: [p for i, p in enumerate(payloads) if streams[i % len(streams)] == s] for s in streams}
    got_by_stream = {s: [d for _, st, d in result["got"] if st == s] for s in streams}
    assert got_by_stream == by_stream  # each exactly once, intact, in order per stream
    assert result["buffered"] == 0 and result["used"] == 0 and result["holders"] == 0


SIZES = [200_000, 1_000_000, 350_000, 2_000_000, 64_000]


@pytest.mark.parametrize("seed", [1, 2])
def test_large_messages_through_loss_reorder_duplication_arrive_once_and_match_the_plain_way(seed):
    conditions = dict(loss=0.03, reorder=0.05, duplicate=0.05)
    quick = _run(seed, quick=True, sizes=SIZES, streams=(0, 1), conditions=conditions)
    _check_exact(quick, (0, 1))
    assert quick["taken"] > 1_000
    plain = _run(seed, quick=False, sizes=SIZES, streams=(0, 1), conditions=conditions)
    _check_exact(plain, (0, 1))
    for key in ("got", "states", "beta_counts", "link_counts", "alpha_counts", "net", "now"):
        assert quick[key] == plain[key], key


def test_a_small_receive_window_that_only_acks_reopen_matches_the_plain_way():
    """beta's window is a few datagrams' worth: alpha waits on ACKs the quick path owes."""
    results = []
    for quick in (True, False):
        results.append(_run(7, quick=quick, sizes=[600_000, 300_000, 300_000, 50_000], conditions=dict(loss=0.01),
                            budget=1 << 20, receive_window=40_000))
    for r in results:
        _check_exact(r)
    assert results[0]["taken"] > 300
    for key in ("got", "states", "beta_counts", "link_counts", "alpha_counts", "net", "now"):
        assert results[0][key] == results[1][key], key


def _hostile(seed: int):
    """alpha, joined, also injects crafted sealed bodies in bursts (one batch each) around an honest message."""
    from tests.transport.attacks import inject_sealed

    def hook(world, alpha, beta):
        rng = random.Random(seed)
        piece = 1_100
        for burst in range(30):
            bodies = []
            stream = 4 + burst % 3
            seq, count = burst // 3, rng.choice([3, 40, 300])
            for number in rng.sample(range(count), min(count, 60)):
                size = piece if number < count - 1 else rng.choice([piece, 150])
                body = _seg(stream, seq, number, count, rng.randbytes(size))
                roll = rng.random()
                if roll < 0.05:
                    body = _seg(stream, seq, number, count + 1, rng.randbytes(piece))
                elif roll < 0.1:
                    body = _seg(stream, seq, number, count, rng.randbytes(piece - 9))
                elif roll < 0.13:
                    body = body + bytes([ChunkKind.PING, 0])
                elif roll < 0.16:
                    body = body[:-5]
                bodies.append(body)
                if rng.random() < 0.1:
                    bodies.append(body)
            for body in bodies:
                inject_sealed(alpha, "beta", body)
            world.run_for(0.01)

    return hook


def test_a_hostile_authenticated_peer_on_the_road_matches_the_plain_way():
    results = [_run(11, quick=q, sizes=[300_000], budget=1 << 20, hook=_hostile(11), limit=60) for q in (True, False)]
    assert results[0]["taken"] > 100
    for key in ("got", "states", "beta_counts", "link_counts", "alpha_counts", "net", "now", "buffered", "used", "holders"):
        assert results[0][key] == results[1][key], key
    assert [d for _, _, d in results[0]["got"] if True][-1:] == results[0]["payloads"][-1:]


def test_large_messages_on_real_loopback_udp_arrive_once_and_nothing_stays_held():
    from flowcast.transport.keep import Keep
    from flowcast.transport.ports import UdpPort
    from flowcast.transport.road import RoadStack
    from flowcast.transport.stack import serve

    taken = [0]

    def counting(self, body, counter, now):
        ok = PIECE_IN(self, body, counter, now)
        taken[0] += ok
        return ok

    stacks = []
    for name in ("alpha", "beta"):
        keep = Keep(None)
        keep.ensure_local(name)
        stacks.append(RoadStack(UdpPort("127.0.0.1", 0), keep, policy="always", datagram_size=1232, hold_budget=4 << 20))
    alpha, beta = stacks
    Link.piece_in = counting
    try:
        alpha.join(beta.address)
        assert serve(stacks, until=lambda: alpha.is_allowed("beta") and beta.is_allowed("alpha"), timeout=5)
        rng = random.Random(4)
        payloads = [rng.randbytes(n) for n in (200_000, 2_000_000, 700_000, 1_000_000)]
        outs = [alpha.send_bytes(p, "beta", stream=i % 2, timeout=None) for i, p in enumerate(payloads)]
        got = []

        def done():
            got.extend(beta.receive_many())
            return all(o.done for o in outs) and len(got) >= len(payloads)

        assert serve(stacks, until=done, timeout=30)
        serve(stacks, timeout=0.2)
        got.extend(beta.receive_many())
        assert all(o.delivered for o in outs)
        assert sorted(m.data for m in got) == sorted(payloads) and len(got) == len(payloads)
        link = beta.remote("alpha").session.link
        assert link.buffered == 0 and beta.hold_budget.used == _session_books(beta.hold_budget) and not beta.hold_budget.holders
        assert taken[0] > 1_000
    finally:
        Link.piece_in = PIECE_IN
        for stack in stacks:
            stack.close()


def test_pieces_taken_quick_after_a_listener_flushed_mid_batch_are_acknowledged_with_the_batch():
    """As test_receive_batch_flush's first test, but the datagrams after the mid-batch flush are all
    middle pieces piece_in takes: the quick path must still queue the remote for the batch's flush."""
    from flowcast.transport.wire import PacketKind

    world = World(seed=33, delay=0.001)
    alpha, beta = world.pair(datagram_size=1232)
    world.run_for(0.1)
    held: list = []
    holding = [True]
    original = world.net._send

    def tapped(data, src, dst):
        if holding[0] and src == "alpha" and dst == "beta" and data[1] == PacketKind.SEALED:
            held.append(bytes(data))
            return
        original(data, src, dst)

    world.net._send = tapped
    big = alpha.send_bytes(random.Random(1).randbytes(30_000), "beta", stream=2)
    world.run_for(0.0005)
    pieces = list(held)
    assert len(pieces) >= 20
    request = alpha.send_bytes(b"request", "beta", stream=1)
    world.run_for(0.0005)
    assert len(held) == len(pieces) + 1
    held_request = held[-1]
    port = world.net._ports["beta"]  # alpha's datagrams stay held (resends too): beta reads only what is put here
    for data in pieces[:6]:  # the message begun, its dict of pieces grown to hold 6-10 (tablesize.GROW_AT)
        assert port._enqueue(data, "alpha")
    world.run_for(0.003)
    taken = [0]

    def counting(self, body, counter, now):
        ok = PIECE_IN(self, body, counter, now)
        taken[0] += ok
        return ok

    beta.hooks.add("message", lambda message: beta.flush() if message.stream == 1 else None)
    link = alpha.remote("beta").session.link
    Link.piece_in = counting
    try:
        for data in [held_request, *pieces[6:10]]:  # one read: the request, then four middle pieces
            assert port._enqueue(data, "alpha")
        world.run_for(0.02)
    finally:
        Link.piece_in = PIECE_IN
    assert request.state == "delivered"
    assert taken[0] == 4  # all four the quick way: no full-path datagram after the flush queues the remote
    from flowcast.transport.wire import HEADER

    read = [HEADER.unpack_from(d)[4] for d in [held_request, *pieces[:10]]]
    acked = [c for c in read if c not in link.inflight]
    # everything beta read was acknowledged within 20 ms (one round trip is 2 ms): not left to a timeout
    assert acked == read
    del big
