"""The receive path's books (reliable.py, budget.py, tablesize.py) stay exact.

The hold accounting is kept inline on the receive path, once per piece, and a
dict of pieces is counted from sizes measured once (tablesize.py) instead of
asking ``sys.getsizeof`` per piece.  These check that the shortcuts count
exactly what the plain way would: each link's ``buffered`` is what it
holds (``held_cost`` of every entry), its ``books`` its streams' states and
age heap entries, the budget's ``used`` and ``holders`` the sum of both and
the set of its links holding anything, and a message
arriving in order is never charged as a whole message.
"""

from __future__ import annotations

import random
import sys

from flowcast.transport.budget import HoldBudget
from flowcast.transport.holding import AGE_COST, STREAM_COST, Partial, held_cost
from flowcast.transport.reliable import MIN_PIECE, Link
from flowcast.transport.tablesize import MEASURED
from flowcast.transport.wire import F_UNRELIABLE, MSG, SEG, SKIP, ChunkKind, WireError
from tests.transport.attacks import seg


def _held(link: Link) -> int:
    """What ``link`` holds, entry by entry, as the plain way counts it."""
    total = sum(held_cost(entry) for entry in link.partials_unreliable.values())
    for state in link.streams_in.values():
        total += sum(held_cost(item) for item in state.pending.values())
    return total


def _useg(seq: int, number: int, count: int, piece: bytes) -> bytes:
    return SEG.pack(ChunkKind.SEG, F_UNRELIABLE, 1, seq, number, count, len(piece)) + piece


def test_a_dict_of_pieces_is_counted_as_getsizeof_sees_it_in_any_order_and_past_the_measured_lengths():
    count = MEASURED * 4 // 3 + 300  # past the measured lengths and a growth beyond: there sys.getsizeof is asked
    link = Link(60_000, lambda *a: None)
    link._hold_limit = 1 << 40
    order = list(range(count - 1))  # the last piece never comes
    random.Random(7).shuffle(order)
    piece = b"p" * MIN_PIECE
    for n, number in enumerate(order):
        link.handle(seg(0, number, count, piece), 0.0)
        entry = link.streams_in[0].pending[0]
        assert entry.table == sys.getsizeof(entry.parts), (n, entry.table)
        assert link.buffered == held_cost(entry)
    entry = link.streams_in[0].pending[0]
    assert entry.table == sys.getsizeof(entry.parts)
    assert link.buffered == _held(link) > count * MIN_PIECE


def test_messages_arriving_in_order_are_never_held_whole():
    budget = HoldBudget(1 << 20)
    delivered: list[int] = []
    link = Link(60_000, lambda stream, flags, data: delivered.append(len(data)), budget=budget)
    first, last = b"a" * 50_000, b"z" * 700
    for seq in range(20):
        link.handle(seg(seq, 0, 2, first), 0.0)
        entry = link.streams_in[0].pending[seq]
        assert link.buffered == budget.used - link.books == held_cost(entry) < len(first) + 2_000
        assert list(budget.holders) == [link]
        link.handle(seg(seq, 1, 2, last), 0.0)
        # delivered at once: nothing held; the books are the stream's state and the age heap's entries
        assert link.buffered == 0 and budget.used == link.books and not budget.holders
        assert link.books == STREAM_COST + AGE_COST * len(link.ages) <= STREAM_COST + AGE_COST * 64
        assert not link.streams_in[0].pending
    assert delivered == [50_700] * 20


def test_the_books_stay_exact_under_mixed_traffic_refusals_and_evictions():
    """Seeded random chunks from three peers into one small budget: in-order and
    out-of-order messages and pieces, duplicates, SKIPs, unreliable pieces,
    refusals and evictions.  After every body each link's ``buffered`` is
    what it holds, and the budget's books are its links' sum and set."""
    rng = random.Random(2024)
    budget = HoldBudget(1 << 18)
    # three: with two sessions a floor is half the budget, and the reserve kept for the idle
    # one's floor (budget.py) means no peer within its floor ever needs an eviction
    links = [Link(60_000, lambda *a: None, budget=budget) for _ in range(3)]
    refused = partials = 0
    for _ in range(3000):
        link = rng.choice(links)
        expected = link.streams_in[0].expected if 0 in link.streams_in else 0
        seq = expected + rng.choice([0, 0, 0, 1, 2, 3, 5, 8])
        kind = rng.random()
        if kind < 0.25:
            body = MSG.pack(ChunkKind.MSG, 0, 0, seq, 300) + b"m" * 300
        elif kind < 0.3:
            body = SKIP.pack(ChunkKind.SKIP, 0, 0, seq)
        elif kind < 0.4:
            body = _useg(rng.randrange(100), rng.randrange(3), 3, b"u" * 5_000)
        else:
            count = 2 + seq % 4
            number = rng.randrange(count)
            view = seq % 3 == 0  # one piece length per message: views are nearly all their datagram
            size = (50_000 if view else 9_000) if number < count - 1 else rng.randrange(1, 9_000)
            body = seg(seq, number, count, b"s" * size)
        try:
            link.handle(body, 0.0)
        except WireError:
            refused += 1  # refused for room, or a piece length this message cannot have
        for each in links:
            assert each.buffered == _held(each) >= 0
        assert budget.used == sum(each.buffered + each.books for each in links) <= budget.limit
        for each in links:
            assert each.books == STREAM_COST * len(each.streams_in) + AGE_COST * len(each.ages)
        assert set(budget.holders) == {each for each in links if each.buffered > 0}
        partials += any(type(item) is Partial for each in links for state in each.streams_in.values() for item in state.pending.values())
    assert refused > 0 and budget.counts["evicted"] > 0 and partials > 100
