"""A lossy, duplicating, reordering network between the estates: still exactly once, in order."""

from __future__ import annotations

import pytest

from tests.cast.kit import Cast, payloads

SEEDS = range(20)


@pytest.mark.parametrize("seed", SEEDS)
def test_exactly_once_in_order_over_loss_duplication_and_reordering(tmp_path, seed):
    cast = Cast(tmp_path, seed=seed, loss=0.10, duplicate=0.02, reorder=0.05, delay=(0.001, 0.01), config={"window": 40})
    sub = cast.service().subscribe("abc/messages/**", estate="abc", into="inbox", lease=9.0)
    first = cast.publish_many(150)
    assert cast.run_until(lambda: len(cast.queue().queue) >= 75, 60)
    # a cut in the middle of the stream: batches lost for good, leases lapsing
    cast.world.net.partition(["abc:main"], ["xyz:main"])
    cast.publish_many(150, prefix="abc/messages/cut")
    cast.world.run_for(12)
    cast.world.net.heal()
    assert cast.run_until(lambda: len(cast.queue().queue) >= 300, 120), (seed, len(cast.queue().queue), sub)
    cast.world.run_for(10)
    assert payloads(cast.queue()) == [b"m%06d" % i for i in range(150)] * 2
    assert len(first) == 150 and sub.cursor == 300
    counts = cast.world.net.counts
    assert counts["lost"] and counts["partitioned"] and counts["duplicated"] + counts["reordered"]  # the faults happened
