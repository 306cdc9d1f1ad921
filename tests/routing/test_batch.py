"""Batches: many messages of one route pair as one parcel on the way, each its own where it lands."""

from __future__ import annotations

import msgpack
import pytest

from flowcast.routing.batch import BATCH_BYTES, MAX_BATCH
from flowcast.routing.events import record_routes
from tests.routing.kit import route_send
from tests.routing.kit import ALLOW_BETA
from tests.routing.test_router import _OK_DST, _OK_SRC, errors_of, forge


def test_every_message_of_a_batch_lands_on_its_own_in_order_and_the_manors_forward_parcels(world, pair):
    alpha, beta = pair
    inbox = beta.store("w1").queue("inbox")
    seen = []
    inbox.watchers.append(lambda share: seen.append(share.queue[-1]["data"]))
    errors_of(alpha, "w1")
    values = [{"n": i} for i in range(300)] + [b"raw", None, "text"]
    assert alpha["w1"].send_many("inbox@w1.beta", values, src="out", tag="t") == len(values)
    assert world.run_until(lambda: len(inbox.queue) == len(values), 10)
    assert [m["data"] for m in inbox.queue] == values
    assert seen == values  # the flow's watcher saw every one: nothing coalesced
    first = inbox.queue[0]
    assert first["tag"] == "t" and first["route"]["src"] == ["out", "w1", "alpha", "main"]
    assert first["route"]["dst"] == ["inbox", "w1", "beta", "main"]
    assert alpha["w1"].counts["sent"] == len(values) and beta["w1"].counts["delivered"] == len(values)
    # One parcel on each hop in between, not 303.
    assert alpha["w1"].counts["to_lane"] == 1
    assert alpha["manor"].counts["to_road"] == 1 and beta["manor"].counts["from_road"] == 1
    assert beta["w1"].counts["from_lane"] == 1
    # The routes a router reports count messages, batched or not.
    assert list(beta["manor"].routes.values()) == [len(values)]
    assert list(alpha["w1"].routes.values()) == [len(values)]


def test_a_batch_over_the_count_or_byte_bound_goes_as_several_parcels(world, pair):
    alpha, beta = pair
    inbox = beta.store("w1").queue("inbox")
    many = list(range(MAX_BATCH + 10))
    big = [bytes([i]) * (BATCH_BYTES // 3) for i in range(7)]  # three fit in no parcel
    assert alpha["w1"].send_many("inbox@w1.beta", many, src="out") == len(many)
    assert alpha["w1"].send_many("inbox@w1.beta", big, src="out") == len(big)
    assert world.run_until(lambda: len(inbox.queue) == len(many) + len(big), 20)
    assert [m["data"] for m in inbox.queue] == many + big
    parcels = alpha["w1"].counts["to_lane"]
    assert 2 + 4 <= parcels <= 2 + 7


def test_a_batch_and_single_messages_of_one_pair_stay_in_order(world, pair):
    alpha, beta = pair
    inbox = beta.store("w1").queue("inbox")
    router = alpha["w1"]
    router.send("inbox@w1.beta", "a", src="out")
    router.send_many("inbox@w1.beta", ["b", "c", "d"], src="out")
    router.send("inbox@w1.beta", "e", src="out")
    router.send_many("inbox@w1.beta", ["f"], src="out")
    assert world.run_until(lambda: len(inbox.queue) == 6, 10)
    assert [m["data"] for m in inbox.queue] == list("abcdef")


def test_the_part_of_a_batch_that_does_not_fit_comes_back_as_one_report_with_its_count(world, pair):
    alpha, beta = pair
    inbox = beta.store("w1").queue("inbox", bound=5)
    out = errors_of(alpha, "w1")
    alpha["w1"].send_many("inbox@w1.beta", list(range(8)), src="out", tag="q")
    assert world.run_until(lambda: len(out.queue) == 1, 10)
    assert [m["data"] for m in inbox.queue] == [0, 1, 2, 3, 4]
    report = out.queue[0]["data"]
    assert report["kind"] == "queue_full" and report["count"] == 3 and report["tag"] == "q"
    assert "3 of a batch of 8" in report["reason"]
    assert beta["w1"].counts["queue_full"] == 3 and beta["w1"].counts["delivered"] == 5
    assert alpha["w1"].counts["errors_back_queue_full"] == 1


def test_a_batch_refused_on_the_way_is_reported_once_for_all_its_messages(world, pair):
    alpha, beta = pair
    out = errors_of(alpha, "w1")
    alpha["w1"].send_many("nothing@w1.beta", list(range(10)), src="out")
    alpha["w1"].send_many("x@w1.gamma/nowhere", list(range(4)), src="out")
    assert world.run_until(lambda: len(out.queue) == 2, 10)
    kinds = sorted((e["data"]["kind"], e["data"]["count"]) for e in out.queue)
    assert kinds == [("no_road", 4), ("no_share", 10)]
    assert beta["w1"].counts["no_share"] == 10 and alpha["manor"].counts["no_road"] == 4


def test_a_denied_batch_is_denied_whole(world):
    alpha = world.routed_estate("alpha", ["manor", "w1"], policy=ALLOW_BETA)
    beta = world.routed_estate("beta", ["manor", "w1"], policy=[])  # lets nothing in
    world.connect(alpha, beta)
    inbox = beta.store("w1").queue("inbox")
    out = errors_of(alpha, "w1")
    alpha["w1"].send_many("inbox@w1.beta", list(range(20)), src="out")
    assert world.run_until(lambda: len(out.queue) == 1, 10)
    assert out.queue[0]["data"]["kind"] == "denied" and out.queue[0]["data"]["count"] == 20
    assert not inbox.queue and beta["manor"].counts["denied"] == 20


def test_a_batch_for_a_share_of_this_house_lands_by_reference(world):
    router = world.routed_estate("alpha", ["manor"])["manor"]
    inbox = router.store.queue("inbox")
    values = [{"a": [1]}, {"b": [2]}]
    assert router.send_many("inbox", values, src="out") == 2
    assert [m["data"] for m in inbox.queue] == values
    assert all(m["data"] is v for m, v in zip(inbox.queue, values))


def test_a_value_share_gets_each_update_of_a_batch_in_order(world, pair):
    alpha, beta = pair
    share = beta.store("w1").share("state")
    versions = []
    share.watchers.append(lambda s: versions.append(s.get("n")))
    alpha["w1"].send_many("state@w1.beta", [{"n": 1}, {"n": 2}, {"n": 3, "m": 0}], src="out")
    assert world.run_until(lambda: share.get("n") == 3, 10)
    assert versions == [1, 2, 3] and share.get("m") == 0


def test_the_batch_extension_is_the_routers_own(world):
    router = world.routed_estate("alpha", ["manor"])["manor"]
    router.store.queue("inbox")
    with pytest.raises(ValueError, match="send_many"):
        router.send("inbox", 1, src="out", ext={"batch": 2})
    assert router.send_many("inbox", [], src="out") == 0


def test_a_recorder_sees_each_message_of_a_batch_with_matching_ids(world, pair):
    alpha, beta = pair
    inbox = beta.store("w1").queue("inbox")

    class Sink:
        def __init__(self):
            self.events = []

        def message(self, kind, msg_id, src, dst, size, latency=None, *, detail=None, share=None):
            self.events.append((kind, msg_id, size))

    sent, got = Sink(), Sink()
    record_routes(alpha["w1"], sent)
    record_routes(beta["w1"], got)
    alpha["w1"].send_many("inbox@w1.beta", ["x", "yy", "zzz"], src="out")
    assert world.run_until(lambda: len(inbox.queue) == 3, 10)
    routed = [(i, s) for kind, i, s in sent.events if kind == "routed"]
    landed = [(i, s) for kind, i, s in got.events if kind == "landed"]
    assert len(routed) == 3 and landed == routed


def _batch_parcel(ext, data) -> bytes:
    return forge(None, None, header=msgpack.packb([_OK_SRC, _OK_DST, "", 0.0, ext]), data=data)


@pytest.mark.parametrize(
    "junk",
    [
        _batch_parcel({"batch": 3}, [1, 2]),  # fewer values than it says
        _batch_parcel({"batch": 2}, [1, 2, 3]),  # more
        _batch_parcel({"batch": 2}, {"a": 1}),  # not an array
        _batch_parcel({"batch": 2}, 7),
        _batch_parcel({"batch": 1}, [1]),  # a batch of one is a plain message
        _batch_parcel({"batch": 0}, []),
        _batch_parcel({"batch": -4}, []),
        _batch_parcel({"batch": MAX_BATCH + 1}, list(range(MAX_BATCH + 1))),
        _batch_parcel({"batch": True}, [1]),
        _batch_parcel({"batch": "2"}, [1, 2]),
        _batch_parcel({"batch": 2.0}, [1, 2]),
        _batch_parcel({"batch": [2]}, [1, 2]),
        forge(None, None, header=msgpack.packb([_OK_SRC, _OK_DST, "", 0.0, {"batch": 2}]), data=1)[:-1] + b"\x92\x01\xc1",
    ],
)
def test_malformed_batches_are_counted_drops_and_land_nothing(world, pair, junk):
    alpha, beta = pair
    share = beta.store("manor").share("b")
    alpha.roads["main"].send_bytes(junk, "beta")
    assert world.run_until(lambda: beta["manor"].counts["malformed"] == 1, 5)
    assert share.fields() == {} and beta["manor"].counts["delivered"] == 0
    # and the stack still works afterwards
    assert alpha["manor"].send_many("b@.beta", [{"ok": 1}, {"ok": 2}])
    assert world.run_until(lambda: share.get("ok") == 2, 5)


def test_a_well_formed_batch_from_a_peer_lands_like_ours(world, pair):
    alpha, beta = pair
    inbox = beta.store("manor").queue("b")
    alpha.roads["main"].send_bytes(_batch_parcel({"batch": 2, "other": "kept"}, ["p", "q"]), "beta")
    assert world.run_until(lambda: len(inbox.queue) == 2, 5)
    assert [m["data"] for m in inbox.queue] == ["p", "q"]


def test_route_send_drains_a_queue_as_a_batch(world, pair):
    alpha, beta = pair
    inbox = beta.store("w1").queue("inbox")
    outq, send, restore = route_send(alpha, "inbox@w1.beta")
    try:
        for i in range(50):
            outq.push(i)
        send()
    finally:
        restore()
    assert not outq.queue
    assert world.run_until(lambda: len(inbox.queue) == 50, 10)
    assert [m["data"] for m in inbox.queue] == list(range(50))
    assert alpha["w1"].counts["to_lane"] == 1


def test_a_batch_of_tiny_values_is_charged_to_a_byte_budget_as_if_each_came_alone(world, pair):
    alpha, beta = pair
    single = beta.store("w1").queue("single", budget=100_000)
    batched = beta.store("w1").queue("batched", budget=100_000)
    alpha["w1"].send("single@w1.beta", None, src="out")
    alpha["w1"].send_many("batched@w1.beta", [None] * 100, src="out")
    assert world.run_until(lambda: len(single.queue) == 1 and len(batched.queue) == 100, 10)
    one = single.held_bytes
    assert one > 40  # the header: two routes, a tag and a stamp
    assert 100 * one <= batched.held_bytes <= 100 * (one + 16)  # its header also says "batch"


def test_a_batch_of_answers_gets_no_pass_as_a_reply(world, readers):
    # alpha reads beta's share: one 'value' may come back without a rule, not 50 of them on that credit.
    alpha, beta, got = readers
    assert alpha["manor"].send("state@.beta", None, src="mine", tag="read")
    assert world.run_until(lambda: got == [1], 5)
    got.clear()
    alpha["manor"].send("state@.beta", None, src="mine", tag="read")  # a read credit beta could spend on a batch
    src = ["state", "manor", "beta", "main"]
    dst = ["mine", "manor", "alpha", "main"]
    forged = forge(None, None, header=msgpack.packb([src, dst, "value", 0.0, {"batch": 50}]), data=[{"n": i} for i in range(50)])
    beta.roads["main"].send_bytes(forged, "alpha")
    assert world.run_until(lambda: alpha["manor"].counts["denied"] == 50, 5)
    world.run_for(1)
    assert len(got) <= 1  # the real answer to the second read, at most; none of the batch


def test_a_watcher_that_raises_on_one_message_of_a_batch_costs_only_that_one(world, pair):
    alpha, beta = pair
    inbox = beta.store("w1").queue("inbox")
    out = errors_of(alpha, "w1")

    def picky(share):
        if share.queue[-1]["data"] == 3:
            raise RuntimeError("no threes")

    inbox.watchers.append(picky)
    alpha["w1"].send_many("inbox@w1.beta", list(range(6)), src="out")
    assert world.run_until(lambda: len(out.queue) == 1, 10)
    # As alone: the message is in the queue (pushed, then its watcher raised), and its sender hears.
    assert [m["data"] for m in inbox.queue] == list(range(6))
    report = out.queue[0]["data"]
    assert report["kind"] == "update_failed" and "no threes" in report["reason"] and "count" not in report
