"""A full send queue to a live estate comes back to the source share as ``send_queue_full`` (issue 25, finding 4)."""

from __future__ import annotations

from tests.routing.kit import ALLOW_ALPHA, ALLOW_BETA, World
from tests.routing.test_router import errors_of


def test_a_full_live_send_queue_is_a_routed_send_queue_full_error():
    world = World(seed=5)
    alpha = world.routed_estate("alpha", ["manor"], policy=ALLOW_BETA)
    beta = world.routed_estate("beta", ["manor"], policy=ALLOW_ALPHA)
    world.connect(alpha, beta)
    alpha.roads["main"].send_queue_bytes = 100_000
    beta.store("manor").queue("q")
    errors = errors_of(alpha, "manor")
    for n in range(30):
        alpha["manor"].send("q@.beta", {"n": n, "pad": "p" * 10_000}, src="out")
    assert world.run_until(lambda: len(beta.store("manor").get("q").queue) + len(errors.queue) == 30, 20)
    kinds = {e["data"]["kind"] for e in errors.queue}
    assert kinds == {"send_queue_full"} and alpha["manor"].counts["send_queue_full"] == len(errors.queue) > 0
    assert len(beta.store("manor").get("q").queue) < 30
