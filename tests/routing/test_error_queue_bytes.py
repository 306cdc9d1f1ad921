"""Issue 25, finding 4 (error queues): ``SHARE.error`` is bounded in bytes, not only in reports.

An estate a policy lets write may send ``error``-tagged messages of any size to a share; they land
in its error queue.  100 of 1 MiB used to be kept (a count of 1,000, no byte budget).
"""

from __future__ import annotations

import pytest

from flowcast.store.store import ERROR_QUEUE_BYTES
from tests.routing.kit import ALLOW_ALPHA, ALLOW_BETA, World


@pytest.fixture
def world():
    return World(seed=25)


def test_large_error_reports_from_a_permitted_estate_stop_at_the_error_queues_byte_budget(world):
    alpha = world.routed_estate("alpha", ["manor"], policy=ALLOW_BETA)  # beta may write anything here
    beta = world.routed_estate("beta", ["manor"], policy=ALLOW_ALPHA)
    world.connect(alpha, beta)
    store = alpha.store("manor")
    store.set_queue_defaults(error_queue_bytes=256 << 10)  # what a layout's shares: error_queue_bytes does
    store.share("s")
    router = alpha["manor"]
    blob = b"e" * (64 << 10)
    for i in range(12):
        beta["manor"].send("s@.alpha", {"reason": "x", "kind": "bogus", "blob": blob}, src="x", tag="error")
    assert world.run_until(lambda: router.counts["errors_back"] == 12, 30)
    errors = store.get("s.error")
    assert len(errors.queue) == 3  # 256 KiB holds three reports of a little over 64 KiB
    assert errors.held_bytes <= 256 << 10
    assert router.counts["errors_overflowed"] == 12 - len(errors.queue)
    assert router.counts["errors_overflowed_bytes"] > (12 - len(errors.queue)) * (64 << 10)
    assert errors.dropped_budget == router.counts["errors_overflowed"]
    assert router.status()["counts"]["errors_overflowed"] == router.counts["errors_overflowed"]  # what flowcast status shows
    assert not beta["manor"].counts["errors_sent"]  # an error about an error is never sent


def test_the_error_queue_budget_is_on_by_default(world):
    alpha = world.routed_estate("alpha", ["manor"], policy=[])
    store = alpha.store("manor")
    store.share("out")
    alpha["manor"].send("t@.beta/nowhere", 1, src="out")  # no such road: refused, reported here
    queue = store.get("out.error")
    assert len(queue.queue) == 1
    assert queue.budget == ERROR_QUEUE_BYTES and 0 < queue.held_bytes < 1000


def test_reports_made_in_this_house_are_counted_at_their_estimated_size(world):
    alpha = world.routed_estate("alpha", ["manor"], policy=[])
    store = alpha.store("manor")
    store.set_queue_defaults(error_queue_bytes=600)
    store.share("out")
    router = alpha["manor"]
    for _ in range(10):  # no road on that channel: refused here, the report lands here
        router.send("t@.beta/nowhere", 1, src="out")
    queue = store.get("out.error")
    assert 0 < len(queue.queue) < 10 and queue.held_bytes <= 600
    assert router.counts["errors_overflowed"] == 10 - len(queue.queue)
