"""Byte budgets on the routing path: a queue share's, and the manor's for messages held for estates not joined yet."""

from __future__ import annotations

import pytest

from tests.routing.kit import World
from tests.routing.kit import ALLOW_ALPHA, ALLOW_BETA
from tests.routing.test_router import errors_of


@pytest.fixture
def world():
    return World(seed=11)


def test_a_queue_over_its_byte_budget_refuses_routed_messages_with_queue_full(world):
    alpha = world.routed_estate("alpha", ["manor", "w1"], policy=ALLOW_BETA)
    beta = world.routed_estate("beta", ["manor", "w1"], policy=ALLOW_ALPHA)
    world.connect(alpha, beta)
    inbox = beta.store("w1").queue("inbox", bound=1000, budget=3000)
    out = errors_of(alpha, "w1")
    for i in range(5):
        alpha["w1"].send("inbox@w1.beta", b"x" * 1000, src="out", tag=f"m{i}")
    assert world.run_until(lambda: len(inbox.queue) + len(out.queue) == 5, 10)
    # Each parcel is a little over 1,000 bytes: two fit in 3,000, the rest are refused, none lost.
    assert [m["tag"] for m in inbox.queue] == ["m0", "m1"]
    assert 2000 < inbox.held_bytes <= 3000
    errors = out.drain()
    assert [e["data"]["kind"] for e in errors] == ["queue_full"] * 3
    assert [e["data"]["tag"] for e in errors] == ["m2", "m3", "m4"]
    assert "bytes held" in errors[0]["data"]["reason"]
    assert beta["w1"].counts["queue_full"] == 3 and inbox.dropped_budget == 3
    assert 3000 < inbox.dropped_bytes < 3300  # bytes, not messages
    inbox.drain()  # the flow takes them: room again
    alpha["w1"].send("inbox@w1.beta", b"y" * 1000, src="out", tag="later")
    assert world.run_until(lambda: len(inbox.queue) == 1, 10)


def test_messages_routed_within_a_house_count_their_estimated_size():
    world = World(seed=3)
    router = world.routed_estate("alpha", ["manor"])["manor"]
    inbox = router.store.queue("inbox", budget=500)
    router.store.queue("out")
    errors = router.store.queue("out.error")
    assert router.send("inbox", b"z" * 300, src="out")
    assert not router.send("inbox", b"z" * 300, src="out")
    assert 300 < inbox.held_bytes < 350
    assert [e["data"]["kind"] for e in errors.drain()] == ["queue_full"]


def test_messages_routed_within_a_house_are_not_packed_to_be_weighed():
    # Their data is passed by reference; packing it just to measure it cost
    # more than routing it (bench/export.py "send and land alone").
    world = World(seed=3)
    router = world.routed_estate("alpha", ["manor"])["manor"]
    inbox = router.store.queue("inbox", budget=32 << 20)
    router.store.queue("out")
    packed = []
    pack = router._pack
    router._pack = lambda data: packed.append(data) or pack(data)
    for i in range(5):
        assert router.send("inbox", {"rows": [{"a": n, "b": "x" * 20} for n in range(50)]}, src="out")
    assert packed == [] and len(inbox.queue) == 5
    assert 5 * 1359 <= inbox.held_bytes  # counted no less than their msgpack (1,359 bytes each)


class _Opaque:
    """Data msgpack cannot pack, that a flow may still route within its house."""

    def __sizeof__(self) -> int:
        return 10_000


def test_unpackable_data_routed_within_a_house_still_counts_against_the_budget():
    world = World(seed=3)
    router = world.routed_estate("alpha", ["manor"])["manor"]
    inbox = router.store.queue("inbox", budget=25_000)
    router.store.queue("out")
    errors = router.store.queue("out.error")
    results = [router.send("inbox", {"obj": _Opaque()}, src="out") for _ in range(3)]
    assert results == [True, True, False] and len(inbox.queue) == 2
    assert [e["data"]["kind"] for e in errors.drain()] == ["queue_full"]


def test_held_messages_are_bounded_in_bytes(world):
    alpha = world.routed_estate("alpha", ["manor"])
    manor = alpha["manor"]
    manor.hold_bytes = 2500
    out = errors_of(alpha, "manor")
    for i in range(4):
        manor.send("x@.nobody", b"p" * 1000, src="out", tag=f"m{i}")
    assert manor.counts["held"] == 2
    assert 2000 < manor.status()["held_bytes"] <= 2500
    errors = out.drain()
    assert [(e["data"]["kind"], e["data"]["tag"]) for e in errors] == [("no_remote", "m2"), ("no_remote", "m3")]
    assert "bytes, already wait" in errors[0]["data"]["reason"]
    assert manor.counts["hold_full"] == 2
    # They expire: the bytes are given back, and there is room again.
    assert world.run_until(lambda: len(out.queue) == 2, 15)
    assert manor.status()["held_bytes"] == 0
    manor.send("x@.nobody", b"p" * 2000, src="out")
    assert manor.counts["held"] == 3


def test_released_messages_give_their_held_bytes_back(world):
    alpha = world.routed_estate("alpha", ["manor"], policy=ALLOW_BETA)
    beta = world.routed_estate("beta", ["manor"], policy=ALLOW_ALPHA)
    inbox = beta.store("manor").queue("inbox")
    for i in range(3):
        alpha["manor"].send("inbox@.beta", b"q" * 500, src="out")
    assert alpha["manor"].status()["held_bytes"] > 1500
    world.connect(beta, alpha)
    assert world.run_until(lambda: len(inbox.queue) == 3, 5)
    assert alpha["manor"].status()["held_bytes"] == 0


def test_a_held_message_that_can_never_fit_the_road_is_refused_at_once(world):
    alpha = world.routed_estate("alpha", ["manor"], policy=ALLOW_BETA)
    manor = alpha["manor"]
    alpha.roads["main"].max_message = 4000
    out = errors_of(alpha, "manor")
    assert not manor.send("inbox@.beta", b"B" * 5000, src="out", tag="big")
    assert manor.status()["held_bytes"] == 0 and manor.counts["held"] == 0
    (error,) = out.drain()
    assert (error["data"]["kind"], error["data"]["tag"]) == ("too_large", "big")


def test_a_held_message_the_road_refuses_at_the_join_is_refused_alone(world):
    alpha = world.routed_estate("alpha", ["manor"], policy=ALLOW_BETA)
    beta = world.routed_estate("beta", ["manor"], policy=ALLOW_ALPHA)
    manor, road = alpha["manor"], alpha.roads["main"]
    inbox = beta.store("manor").queue("inbox")
    out = errors_of(alpha, "manor")
    assert manor.send("inbox@.beta", b"s" * 100, src="out", tag="m0")
    assert manor.send("inbox@.beta", b"B" * 5000, src="out", tag="big")
    assert manor.send("inbox@.beta", b"s" * 100, src="out", tag="m2")
    road.max_message = 4000  # the limit changed while they waited: the join cannot send "big"
    world.connect(beta, alpha)
    assert world.run_until(lambda: len(inbox.queue) == 2, 5)
    assert [m["tag"] for m in inbox.queue] == ["m0", "m2"]  # the one behind it is not lost
    assert manor.status()["held_bytes"] == 0 and manor._held.count == 0 and manor.status()["held"] == {}
    assert [(e["data"]["kind"], e["data"]["tag"]) for e in out.drain()] == [("too_large", "big")]
    assert not road.counts.get("internal_errors")
