"""``Link.piece_in`` (reassembly.py) does what ``handle`` and ``received`` would, or nothing.

The road's receive path offers every sealed body to ``piece_in`` first.  So
two links fed the same bodies -- one the plain way, one ``piece_in`` first
-- must end alike in everything: messages delivered, pieces held, the
books of the link and of a shared hold budget, the ranges to acknowledge
and the ACK owed, refusals and duplicates counted.  The bodies are random
mixes of what a hostile or lossy peer sends: pieces out of order, repeated,
of another length or count, other streams, unreliable ones, pieces past
256, too much for the budget.
"""

from __future__ import annotations

import random

import pytest

from flowcast.transport.budget import HoldBudget
from flowcast.transport.holding import Partial
from flowcast.transport.reliable import MIN_PIECE, Link
from flowcast.transport.wire import F_UNRELIABLE, SEG, ChunkKind
from tests.transport.attacks import offer


def _seg(stream: int, seq: int, number: int, count: int, piece: bytes, flags: int = 0) -> bytes:
    return SEG.pack(ChunkKind.SEG, flags, stream, seq, number, count, len(piece)) + piece


def _link(budget: HoldBudget, delivered: list) -> Link:
    link = Link(1_200, lambda stream, flags, data: delivered.append((stream, flags, bytes(data))), budget=budget)
    link._hold_limit = 600_000
    return link


def _state(link: Link, budget: HoldBudget) -> tuple:
    streams = {}
    for stream, state in link.streams_in.items():
        held = {}
        for seq, item in state.pending.items():
            if type(item) is Partial:
                held[seq] = ("partial", item.count, item.size, item.waste, item.piece, item.table, item.step, item.grow_at, item.last,
                             {n: bytes(p) for n, p in item.parts.items()})
            else:
                held[seq] = item
        streams[stream] = (state.expected, held)
    unreliable = {key: (p.size, p.waste, sorted(p.parts)) for key, p in link.partials_unreliable.items()}
    return (
        streams,
        unreliable,
        link.buffered,
        budget.used,
        len(budget.holders),
        [list(r) for r in link.recv_ranges],
        link.ack_pending,
        link.ack_owed,
        link.ack_due,
        dict(link.counts),
    )


def _bodies(rng: random.Random, n: int) -> list[bytes]:
    """Pieces of a few messages on two streams, shuffled locally, with hostile ones mixed in."""
    out = []
    piece = 1_100
    messages = [(stream, seq, rng.choice([3, 12, 57, 300])) for seq in range(6) for stream in (0, 5)]
    for stream, seq, count in messages:
        numbers = list(range(count))
        # mostly in order, some swapped nearby, some lost for a while
        for i in range(len(numbers) - 1):
            if rng.random() < 0.1:
                numbers[i], numbers[i + 1] = numbers[i + 1], numbers[i]
        for number in numbers:
            size = piece if number < count - 1 else rng.choice([piece, 37, MIN_PIECE])
            body = _seg(stream, seq, number, count, rng.randbytes(size))
            out.append(body)
            roll = rng.random()
            if roll < 0.05:
                out.append(body)  # a duplicate
            elif roll < 0.07:
                out.append(_seg(stream, seq, (number + 1) % count, count + 1, rng.randbytes(piece)))  # count changed
            elif roll < 0.09:
                out.append(_seg(stream, seq, (number + 2) % count, count, rng.randbytes(piece - 8)))  # length changed
            elif roll < 0.11:
                out.append(_seg(stream, seq + 50, number, count, rng.randbytes(piece), F_UNRELIABLE))
            elif roll < 0.12:
                out.append(_seg(stream, seq, count + 3, count, rng.randbytes(piece)))  # number past count
            elif roll < 0.13:
                out.append(_seg(stream, seq, number, count, rng.randbytes(piece))[:-1])  # cut short
            if len(out) >= n:
                return out
    return out


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("budget_limit", [10_000_000, 150_000])
def test_piece_in_first_ends_exactly_as_the_plain_way(seed, budget_limit):
    rng = random.Random(seed)
    bodies = _bodies(rng, 4_000)
    for i in range(len(bodies) - 40):  # some come late: held pieces wait behind their gap
        if rng.random() < 0.03:
            bodies.insert(i + 30, bodies.pop(i))
    plain_budget, quick_budget = HoldBudget(budget_limit), HoldBudget(budget_limit)
    plain_delivered: list = []
    quick_delivered: list = []
    plain, quick = _link(plain_budget, plain_delivered), _link(quick_budget, quick_delivered)
    outcomes = {"quick": 0, "handled": 0, "refused": 0}
    for counter, body in enumerate(bodies):
        now = counter * 0.0001
        expected = offer(plain, body, counter, now, quick=False)
        got = offer(quick, body, counter, now, quick=True)
        outcomes[got] += 1
        assert (got == "refused") == (expected == "refused"), (counter, got, expected)
        if counter % 97 == 0 or got != "quick":
            assert _state(quick, quick_budget) == _state(plain, plain_budget), counter
        if counter % 500 == 0:  # the application takes an ACK now and then: delayed-ACK state restarts
            plain._ack_chunk()
            quick._ack_chunk()
    assert _state(quick, quick_budget) == _state(plain, plain_budget)
    assert quick_delivered == plain_delivered
    if budget_limit >= 1_000_000:
        assert len(plain_delivered) > 10
        assert outcomes["quick"] > len(bodies) // 2  # the quick way is the common one here
    else:  # the budget refused pieces, after some were taken quick: that edge was compared too
        assert plain.counts["refused"] > 0 and outcomes["quick"] > 20


def test_a_64_kib_message_in_1232_byte_datagrams_is_taken_quick_but_for_a_few_pieces():
    delivered: list = []
    budget = HoldBudget(1 << 24)
    link = _link(budget, delivered)
    payload = random.Random(3).randbytes(65_536)
    piece = 1_160
    count = -(-len(payload) // piece)
    taken = 0
    for number in range(count):
        body = _seg(0, 0, number, count, payload[number * piece : (number + 1) * piece])
        taken += offer(link, body, number, 0.0, quick=True) == "quick"
    assert delivered == [(0, 0, payload)]
    assert link.buffered == 0 and budget.used == link.books and not budget.holders
    # the first, the last, and the few where the dict of pieces grows go the whole way
    assert count - 8 <= taken <= count - 2
    assert link.recv_ranges == [[0, count - 1]] and link.ack_owed


def test_a_link_with_a_watch_is_never_taken_quick():
    link = _link(HoldBudget(1 << 24), [])
    link.handle(_seg(0, 0, 0, 10, b"a" * 1_100), 0.0)
    link.watch = object()  # anything: piece_in must leave the body to handle, which reports to it
    assert not link.piece_in(_seg(0, 0, 1, 10, b"b" * 1_100), 1, 0.0)
    assert sorted(link.streams_in[0].pending[0].parts) == [0]
