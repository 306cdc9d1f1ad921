"""A cache in a worker house (``cast: {house: w1}``) is subscribed with the documented grant, on the simulated network.

xyz's bob addresses the estate (``cast@.abc``), as for a cache in the
manor, and abc's policy has only ``{allow: subscribe, estate: xyz, share:
cast}``: abc's manor admits the subscription tags by that permission and
passes them on to w1, whose publisher answers.
"""

from __future__ import annotations

from flowcast.cast import Cache, CastConfig, CastService
from tests.cast.kit import FROM_ABC, payloads, subscribe_rule
from tests.routing.kit import World


class WorkerCache:
    """abc: manor + w1 with the cache in w1; xyz: manor + bob subscribing."""

    def __init__(self, tmp_path, *, policy=None, grants=None, window: int = 2000) -> None:
        self.world = World(seed=7)
        self.abc = self.world.routed_estate("abc", ["manor", "w1"], policy=[subscribe_rule("xyz")] if policy is None else policy)
        self.xyz = self.world.routed_estate("xyz", ["manor", "bob"], policy=[FROM_ABC])
        self.world.connect(self.abc, self.xyz)
        path = tmp_path / "abc" / "cache.sqlite3"
        path.parent.mkdir(parents=True)
        self.cache = Cache.open(path, estate="abc", clock=self.world.scheduler.clock, scheduler=self.world.scheduler)
        config = CastConfig(subscribers=grants if grants is not None else {"xyz": ("abc/messages/**",)}, window=window)
        self.w1 = CastService(self.abc["w1"], cache=self.cache, config=config, cache_yard="w1")
        self.manor = CastService(self.abc["manor"], config=config, cache_yard="w1", inbox=tmp_path / "abc" / "inbox-manor.sqlite3")
        self.bob = CastService(self.xyz["bob"], config=config, inbox=tmp_path / "xyz" / "inbox-bob.sqlite3")

    def run_until(self, predicate, limit: float = 30.0) -> bool:
        return self.world.run_until(predicate, limit)


def test_a_worker_cache_is_subscribed_through_the_manor_with_the_subscribe_grant_alone(tmp_path):
    abc = WorkerCache(tmp_path, window=8)  # a small window: the stream needs cursor reports, which pass the door too
    sub = abc.bob.subscribe("abc/messages/**", estate="abc", into="inbox")
    assert abc.run_until(lambda: sub.state == "active", 10), sub.error
    tickets = [abc.w1.publish(f"abc/messages/w1/{i}", b"w%d" % i) for i in range(30)]
    tickets += [abc.manor.publish(f"abc/messages/manor/{i}", b"m%d" % i) for i in range(10)]  # through the lane to w1
    assert abc.run_until(lambda: all(t.done for t in tickets), 10) and not any(t.error for t in tickets)
    queue = abc.xyz.store("bob").queue("inbox")
    assert abc.run_until(lambda: len(payloads(queue)) == 40, 30)
    assert sorted(payloads(queue)) == sorted([b"w%d" % i for i in range(30)] + [b"m%d" % i for i in range(10)])
    manor = abc.abc["manor"]
    assert manor.counts["forwarded"] > 0 and manor.counts["denied"] == 0
    held = abc.w1.publisher.subs
    assert [h.estate for h in held.values()] == ["xyz"]  # held at w1, known as xyz's
    sub.close()  # cast.unsub takes the same door
    assert abc.run_until(lambda: not held, 5)
    abc.manor.close()  # the door closes with the manor's service
    again = abc.bob.subscribe("abc/messages/**", estate="abc", into="inbox2")
    assert abc.run_until(lambda: again.state == "refused", 10) and not held


def test_the_door_applies_the_policy_and_the_publisher_its_grants(tmp_path):
    denied = WorkerCache(tmp_path / "a", policy=[])  # no subscribe rule at abc: refused at the manor, by policy
    sub = denied.bob.subscribe("abc/messages/**", estate="abc", into="inbox")
    assert denied.run_until(lambda: sub.state == "refused", 10)
    assert "denied by policy" in sub.error and not denied.w1.publisher.subs
    assert denied.abc["manor"].counts["denied"] >= 1
    wide = WorkerCache(tmp_path / "b")  # let in by the policy, refused by CAST's grants at w1: the remote is still xyz
    sub = wide.bob.subscribe("abc/**", estate="abc", into="inbox")
    assert wide.run_until(lambda: sub.state == "refused", 10)
    assert "may not subscribe" in sub.error and wide.w1.publisher.counts["sub_denied"] == 1
