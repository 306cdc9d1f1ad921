"""Issue 25, finding 7: eviction costs and fair shares under peers holding all they can.

Was a finding: three peers sending incomplete messages at 9.8 MB/s made each
honest 200 KB message cost the victim 0.7-0.85 s of CPU in evictions -- an
eviction listed, sorted and copied everything the largest holder held --
and the attackers regained the honest peer's share whenever it held
nothing, since the share divided by the links holding something.

The costs here are counted, not timed: the lines of budget.py and
heldage.py an eviction or a sweep runs (sys.settrace, deterministic),
with few and with many entries held by the evicted peer.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from flowcast.transport import budget as budget_module
from flowcast.transport.budget import HoldBudget
from flowcast.transport.holding import STREAM_COST
from flowcast.transport.reliable import MIN_PIECE, Link
from flowcast.transport.wire import MSG, ChunkKind, WireError
from tests.transport.attacks import seg

_WATCHED = {str(Path(budget_module.__file__).parent / name) for name in ("budget.py", "heldage.py")}


def _lines(call: Callable[[], object]) -> int:
    """Lines of budget.py and heldage.py that ``call()`` runs."""
    count = 0

    def local(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return local

    def tracer(frame, event, arg):
        return local if frame.f_code.co_filename in _WATCHED else None

    sys.settrace(tracer)
    try:
        call()
    finally:
        sys.settrace(None)
    return count


def _hoard(link: Link, messages: int, first: int = 0) -> None:
    """``messages`` incomplete messages of two pieces, the smallest a message may have, on stream 0."""
    piece = b"t" * MIN_PIECE
    for start in range(first, first + messages, 200):
        link.handle(b"".join(seg(seq, 0, 2, piece) for seq in range(start, min(start + 200, first + messages))), 0.0)


@pytest.mark.parametrize("what", ["evict", "expire"])
def test_an_eviction_or_a_sweep_costs_what_it_drops_not_what_the_peer_holds(what):
    costs = {}
    for held in (1_000, 40_000):
        link = Link(60_000, lambda *a: None, budget=HoldBudget(1 << 30, incomplete_after=10.0))
        link._hold_limit = 1 << 40
        if what == "evict":
            _hoard(link, held)
            before = link.counts.get("evicted", 0)
            costs[held] = _lines(lambda: budget_module.evict(link, 5_000))  # a handful of entries
            assert 4 <= link.counts["evicted"] - before <= 40
        else:
            # whole messages held behind a gap (never due) and a few incomplete ones that are
            link.handle(b"".join(MSG.pack(ChunkKind.MSG, 0, 1, s, 1) + b"m" for s in range(1, held + 1)), 0.0)
            for seq in range(5):
                link.handle(seg(seq, 0, 2, b"t" * MIN_PIECE, stream=2), 0.0)
            costs[held] = _lines(lambda: budget_module.expire(link, 11.0))
            assert link.counts["expired"] == 5
    # listing and sorting what the peer held made these grow forty-fold
    assert costs[40_000] <= 1.5 * costs[1_000] + 50, costs


def test_the_honest_floor_is_not_regained_by_attackers_each_time_the_honest_peer_holds_nothing():
    budget = HoldBudget(2 << 20)
    attackers = [Link(60_000, lambda *a: None, budget=budget) for _ in range(3)]
    delivered: list[int] = []
    honest = Link(60_000, lambda stream, flags, data: delivered.append(len(data)), budget=budget)
    seqs = [0] * 3
    piece = b"a" * 50_000
    for round_ in range(5):
        for n, attacker in enumerate(attackers):  # each holds all it may of messages that never complete
            try:
                for _ in range(100):
                    attacker.handle(seg(seqs[n], 1 + seqs[n] % 30, 32, piece), 0.0)
                    seqs[n] += 1
            except WireError:
                pass
        assert budget.used <= budget.soft + 60_000 * 3
        evicted = budget.counts["evicted"]
        for number in range(6):  # 300 kB, within the honest floor (512 kB)
            honest.handle(seg(round_, number, 6, b"h" * 50_000), 1.0)
        assert delivered == [300_000] * (round_ + 1)
        # the floor kept free took it: no eviction, so no honest message pays for one (the
        # attackers evict each other, within their own floors: their cost, not the honest peer's)
        assert budget.counts["evicted"] == evicted, round_
    assert sum(a.counts["refused"] for a in attackers) >= 3


def test_the_heap_evicts_in_the_order_a_sort_of_everything_would():
    """Differential: after random progress, evictions drop the least recently progressed entries
    first (whole messages held out of order last), as sorting every entry by last progress did."""
    import random

    from flowcast.transport.holding import Partial

    rng = random.Random(25)
    link = Link(60_000, lambda *a: None, budget=HoldBudget(1 << 30))
    link._hold_limit = 1 << 40
    piece = b"t" * MIN_PIECE
    for seq in range(1, 400):  # stream 0 waits for seq 0: everything is held
        if rng.random() < 0.2:
            link.handle(MSG.pack(ChunkKind.MSG, 0, 0, seq, 10) + b"w" * 10, 0.0)
        else:
            link.handle(seg(seq, 0, 4, piece), rng.uniform(0, 10))
    state = link.streams_in[0]  # its dict of what waits is copied as evictions thin it: read it afresh
    for _ in range(600):  # later pieces move some messages' last progress on
        seq = rng.choice([s for s, item in state.pending.items() if type(item) is Partial])
        number = len(state.pending[seq].parts)
        if number < 3:
            link.handle(seg(seq, number, 4, piece), rng.uniform(10, 20))

    def key(seq):
        item = state.pending[seq]
        return item.last if type(item) is Partial else float("inf")

    expected = sorted((key(seq), seq) for seq in state.pending)
    dropped: list[tuple[float, int]] = []
    while state.pending:
        before = {seq: key(seq) for seq in state.pending}
        budget_module.evict(link, 1)
        gone = set(before) - set(state.pending)
        assert len(gone) == 1
        seq = gone.pop()
        dropped.append((before[seq], seq))
    # the same entries, in the same order of last progress (ties, such as the whole messages', may go either way)
    assert [when for when, _ in dropped] == [when for when, _ in expected]
    assert sorted(seq for _, seq in dropped) == sorted(seq for _, seq in expected)
    assert link.buffered == 0 and link.books == STREAM_COST  # every heap entry gone with what it stood for
