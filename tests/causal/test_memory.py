"""What a relay and its mailbox hold per buffered message, measured with tracemalloc.

Issue 25, finding 9: about 0.8 KB per buffered message (833 B in this
measure before the index was packed, claims lost their tuple keys, a
waiter list of one became the entry itself and a one-dep message kept its
dep without a tuple).  The issue's goal is 400 B; this test holds what is
reached now (docs/causal.md, "Budgets", says where the rest goes).

Deterministic: the same messages in the same order allocate the same
objects; only allocations made by the causal layer's own code are counted
(the CAST cache's are its own budget), after a warm-up that fills the
relay's table of recent signatures.
"""

from __future__ import annotations

import gc
import tracemalloc

from flowcast.causal.message import make
from tests.causal.kit import TOPIC, Causal

N = 4000
WARM = 300
BOUND = 480


def test_a_buffered_message_costs_the_relay_and_mailbox_at_most_the_bound(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "beta"), follow=False,
                   config={"heads_every": None, "max_per_publisher": 100_000, "max_buffered": 100_000})
    beta = world.services["beta"]
    sub = beta.subscribe(TOPIC, "inbox")
    key = world.keys["alpha"]
    chain = [make(key, TOPIC, b"withheld: everything after it waits")]
    for i in range(WARM + N):
        chain.append(make(key, TOPIC, b"x" * 100, deps=[chain[-1].id]))
    wires = [m.wire for m in chain[1:]]
    del chain

    def feed(part: list[bytes]) -> None:
        for wire in part:
            assert beta.relay.accept(wire, "alpha") == "stored"
        assert world.run_until(lambda: not beta.relay.pending, 60)

    feed(wires[:WARM])
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        feed(wires[WARM:])
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    assert len(sub.mailbox.buffered) == WARM + N
    mine = [tracemalloc.Filter(True, "*flowcast/causal/*")]
    grown = sum(d.size_diff for d in after.filter_traces(mine).compare_to(before.filter_traces(mine), "filename"))
    assert grown / N <= BOUND, f"{grown / N:.0f} B per buffered message"
