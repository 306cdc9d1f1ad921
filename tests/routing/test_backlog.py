"""A full transport backlog is routed back to the sending flow as an error of its own kind."""

from __future__ import annotations

from tests.routing.kit import World
from tests.routing.kit import ALLOW_ALPHA, ALLOW_BETA
from tests.routing.test_router import errors_of


def test_full_backlog_of_a_down_estate_is_a_routed_backlog_full_error():
    world = World(seed=77)
    alpha = world.routed_estate("alpha", ["manor", "w1"], policy=ALLOW_BETA)
    beta = world.routed_estate("beta", ["manor", "w1"], policy=ALLOW_ALPHA)
    world.connect(alpha, beta)
    errors = errors_of(alpha, "w1")
    beta.store("manor").queue("t")
    road = alpha.roads["main"]
    road.backlog_messages = 5
    world.net.partition(["alpha:main"], ["beta:main"])
    assert world.run_until(lambda: road.remote("beta").presence.value == "dead", 30)
    for n in range(12):
        alpha["w1"].send("t@.beta", n, src="out")
    assert world.run_until(lambda: len(errors.queue) == 7, 10)
    reports = [errors.pop()["data"] for _ in range(7)]
    assert all(r["kind"] == "backlog_full" and "backlog full" in r["reason"] for r in reports), reports
    assert alpha["manor"].counts["backlog_full"] == 7
    world.net.heal()
    got = beta.store("manor").get("t")
    assert world.run_until(lambda: len(got.queue) == 5, 30)
    assert [got.pop()["data"] for _ in range(5)] == [0, 1, 2, 3, 4]  # the queued ones arrive, in order
    world.run_for(2.0)
    assert len(errors.queue) == 0  # and nothing more was refused
