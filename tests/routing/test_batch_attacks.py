"""Batch parcels attacked from an allowed remote: budgets, bounds, counts, answers and records hold as for single messages."""

from __future__ import annotations

import msgpack

from flowcast.routing.batch import MAX_BATCH
from flowcast.routing.events import record_routes
from tests.routing.kit import route_send
from tests.routing.kit import ALLOW_BETA
from tests.routing.test_router import errors_of, forge


def batch_parcel(src, dst, tag, ext, data) -> bytes:
    return forge(None, None, header=msgpack.packb([list(src), list(dst), tag, 0.0, ext]), data=data)


# 1. byte budget --------------------------------------------------------------------------------


def test_budget_a_message_larger_than_the_whole_budget_lands_when_batched(world, pair):
    alpha, beta = pair
    budget = 10_000
    inbox = beta.store("w1").queue("inbox", budget=budget)
    blob = b"x" * 40_000
    # Alone, it is (rightly) refused: 40 KB does not fit a 10 KB budget.
    alpha["w1"].send("inbox@w1.beta", blob, src="out")
    world.run_for(2)
    assert not inbox.queue
    # In a batch with tiny values it is charged (header + 1/count of the data) ~ 90 bytes.
    alpha["w1"].send_many("inbox@w1.beta", [blob] + [None] * 4000, src="out")
    world.run_for(2)
    assert inbox.held_bytes <= budget  # the books say it fits ...
    real = sum(len(m["data"]) for m in inbox.queue if isinstance(m["data"], bytes))
    assert real <= budget, f"queue holds {real} bytes of data under a {budget}-byte budget"


def test_budget_bound_refusal_lets_big_values_in_at_a_fraction_of_their_size(world, pair):
    # A remote (alpha) sends [big, tiny*1999] batches to a queue at its message bound less one:
    # each time the big value lands charged ~1/2000 of its size and the tiny ones are refused.
    # A consumer takes one message per round; after 10 rounds the queue is all big values.
    alpha, beta = pair
    budget = 100_000
    inbox = beta.store("w1").queue("inbox", bound=10, budget=budget)
    for i in range(9):
        inbox.push({"data": None}, 10)
    parcel = batch_parcel(["out", "w1", "alpha", "main"], ["inbox", "w1", "beta", "main"], "", {"batch": 2000}, [b"y" * 45_000] + [None] * 1999)
    for _ in range(10):
        alpha.roads["main"].send_bytes(parcel, "beta")
        world.run_for(0.5)
        inbox.queue.popleft()
    real = sum(len(m["data"]) for m in inbox.queue if isinstance(m["data"], bytes))
    assert real <= budget, f"queue holds {real} bytes of data under a {budget}-byte budget (charged {inbox.held_bytes})"


# 2. reads batched: one credit for N answers -----------------------------------------------------


def test_a_batch_of_reads_gets_every_answer(world, readers):
    alpha, beta, got = readers
    assert alpha["manor"].send_many("state@.beta", [None] * 5, src="mine", tag="read") == 5
    world.run_for(5)
    assert beta["manor"].counts["reads"] == 5
    # Five reads, each answered by beta: each answer should land as five single reads' would.
    assert len(got) == 5, f"{len(got)} of 5 answers landed; alpha denied {alpha['manor'].counts['denied']}"


def test_a_batch_of_reads_does_not_provoke_error_reports_back(world):
    alpha = world.routed_estate("alpha", ["manor"], policy=[])
    beta = world.routed_estate("beta", ["manor"], policy=[{"allow": "read", "estate": "alpha"}])
    world.connect(alpha, beta)
    beta.store("manor").share("state").update(n=1)
    alpha.store("manor").share("mine")
    alpha["manor"].send_many("state@.beta", [None] * 50, src="mine", tag="read")
    world.run_for(5)
    # alpha's manor answers each answer beyond the single credit with an error report to beta
    assert alpha["manor"].counts["errors_sent"] == 0, alpha["manor"].counts


# 3. mixed refusal kinds ---------------------------------------------------------------------------


def test_each_refusal_kind_of_a_partly_landed_batch_is_counted_as_itself(world, pair):
    alpha, beta = pair
    inbox = beta.store("w1").queue("inbox", bound=5)

    def picky(share):
        if share.queue[-1]["data"] == 0:
            raise RuntimeError("no zeros")

    inbox.watchers.append(picky)
    alpha["w1"].send_many("inbox@w1.beta", list(range(8)), src="out")
    world.run_for(2)
    counts = beta["w1"].counts
    # Sent one by one: update_failed 1 (value 0), queue_full 3 (values 5, 6, 7).
    assert (counts["update_failed"], counts["queue_full"]) == (1, 3), dict(counts)


# 4. routes counts -------------------------------------------------------------------------------


def test_routes_count_the_landed_part_of_a_batch_as_singles_would(world, pair):
    alpha, beta = pair
    beta.store("w1").queue("one", bound=5)
    beta.store("w1").queue("many", bound=5)
    for i in range(8):
        alpha["w1"].send("one@w1.beta", i, src="out")
    alpha["w1"].send_many("many@w1.beta", list(range(8)), src="out")
    world.run_for(2)
    routes = {dst.share: n for (src, dst), n in beta["w1"].routes.items()}
    assert routes.get("one") == 5
    assert routes.get("many") == 5, routes


# 5. the hold's message limit -------------------------------------------------------------------


def test_the_hold_limit_bounds_messages_not_parcels(world):
    alpha = world.routed_estate("alpha", ["manor"], policy=[])
    router = alpha["manor"]
    router.hold_limit = 100
    router.store.queue("out")
    for _ in range(10):
        router.send_many("inbox@.gamma", list(range(100)), src="out")
    waiting = sum(n for n in [router._held.count])
    messages = sum(len(e[3]) and __import__("flowcast.routing.batch", fromlist=["x"]).parcel_count(e[3])
                   for q in router._held._queues.values() for e in q)
    assert messages <= router.hold_limit, f"{messages} messages held in {waiting} parcels under hold_limit {router.hold_limit}"


def test_held_and_released_count_messages(world):
    alpha = world.routed_estate("alpha", ["manor"], policy=[])
    router = alpha["manor"]
    router.store.queue("out")
    router.send_many("inbox@.gamma", list(range(100)), src="out")
    assert router.counts["held"] == 100, dict(router.counts)


# 6. 'route send' draining a queue: one bad value costs only itself ----------------------------------


def test_route_send_with_one_unpackable_item_sends_the_rest_and_reports_it(world, pair):
    alpha, beta = pair
    inbox = beta.store("w1").queue("inbox")
    errors = alpha.store("w1").queue("outq.error")
    outq, send, restore = route_send(alpha, "inbox@w1.beta")
    try:
        for item in (1, 2, {3}, 4):  # a set does not pack
            outq.push(item)
        send()
    finally:
        restore()
    assert world.run_until(lambda: len(inbox.queue) == 3, 5)
    assert [m["data"] for m in inbox.queue] == [1, 2, 4] and not outq.queue
    assert [e["data"]["kind"] for e in errors.queue] == ["unpackable"]
    assert alpha["w1"].counts["sent"] == 4 and alpha["w1"].counts["unpackable"] == 1


def test_a_batch_of_a_tag_with_a_handler_at_the_far_end_is_refused_whole_and_said_so(world, pair):
    alpha, beta = pair
    beta.store("w1").share("h")
    seen = []
    beta["w1"].handle("hh", lambda landing: seen.append(landing.data))
    out = errors_of(alpha, "w1")
    alpha["w1"].send_many("h@w1.beta", [1, 2], src="out", tag="hh")
    assert world.run_until(lambda: len(out.queue) == 1, 5)
    assert seen == [] and out.queue[0]["data"]["kind"] == "unbatchable" and out.queue[0]["data"]["count"] == 2
    # A house that knows the tag's handler sends its messages one by one.
    alpha["w1"].handle("hh", lambda landing: None)
    alpha["w1"].send_many("h@w1.beta", [3, 4], src="out", tag="hh")
    assert world.run_until(lambda: seen == [3, 4], 5)


# 7. the export recorder -----------------------------------------------------------------------


class Sink:
    def __init__(self):
        self.events = []

    def message(self, kind, msg_id, src, dst, size, latency=None, *, detail=None, share=None):
        self.events.append((kind, msg_id))


def test_recorder_a_batch_refused_in_its_own_house_has_a_refused_event_per_routed_id(world):
    def run(name, batched):
        router = world.routed_estate(name, ["manor"])["manor"]
        router.store.queue("out")
        sink = Sink()
        record_routes(router, sink)
        if batched:
            router.send_many("x@.gamma/nowhere", [1, 2, 3], src="out")  # no road 'nowhere'
        else:
            for v in (1, 2, 3):
                router.send("x@.gamma/nowhere", v, src="out")
        return [i for k, i in sink.events if k == "refused"]

    singles = run("alpha", False)
    assert singles == ["0.0:0", "0.0:1", "0.0:2"]  # three send()s: each refusal names its message
    batched = run("alphb", True)
    assert batched == singles, f"batch: refused events {batched}"


def test_recorder_at_a_receiving_manor_records_each_message_of_a_denied_batch(world):
    alpha = world.routed_estate("alpha", ["manor", "w1"], policy=ALLOW_BETA)
    beta = world.routed_estate("beta", ["manor", "w1"], policy=[])
    world.connect(alpha, beta)
    sink = Sink()
    record_routes(beta["manor"], sink)
    alpha["w1"].send_many("inbox@w1.beta", list(range(20)), src="out")
    assert world.run_until(lambda: beta["manor"].counts["denied"] == 20, 5)
    refused = [e for e in sink.events if e[0] == "refused"]
    assert len(refused) == 20, f"{len(refused)} refused events for 20 denied messages"


# 8. counts taken from a header no one checked ----------------------------------------------------


def test_a_junk_batch_denied_on_the_way_counts_as_one_not_4096(world):
    alpha = world.routed_estate("alpha", ["manor"], policy=ALLOW_BETA)
    beta = world.routed_estate("beta", ["manor"], policy=[])
    world.connect(alpha, beta)
    junk = batch_parcel(["out", "manor", "alpha", "main"], ["inbox", "manor", "beta", "main"], "", {"batch": MAX_BATCH}, 7)
    alpha.roads["main"].send_bytes(junk, "beta")  # 30-odd bytes, not an array at all
    world.run_for(2)
    assert beta["manor"].counts["denied"] <= 1, dict(beta["manor"].counts)


# 9. amplification: one parcel of reads makes the answering manor send N road messages -------------


def test_one_parcel_of_reads_costs_the_reader_no_less_than_single_reads(world):
    alpha = world.routed_estate("alpha", ["manor"], policy=[{"allow": "any", "estate": "beta"}])
    beta = world.routed_estate("beta", ["manor"], policy=[{"allow": "read", "estate": "alpha"}])
    world.connect(alpha, beta)
    beta.store("manor").share("state").update(blob="q" * 1000)
    alpha.store("manor").share("mine")
    parcel = batch_parcel(["mine", "manor", "alpha", "main"], ["state", "manor", "beta", "main"], "read", {"batch": MAX_BATCH}, [None] * MAX_BATCH)
    single = forge(["mine", "manor", "alpha", "main"], ["state", "manor", "beta", "main"], "read", 0.0, None)
    alpha.roads["main"].send_bytes(parcel, "beta")
    world.run_for(30)
    answers = beta["manor"].counts["to_road"]
    # single reads: one ~1 KB answer per ~70-byte parcel; here 4,096 answers for one 4 KB parcel
    in_per_answer = len(parcel) / max(answers, 1)
    assert in_per_answer >= len(single) / 2, f"{answers} road messages (~{answers * 1000} bytes) answered one {len(parcel)}-byte parcel"


# 10. send_many takes any iterable; a deque (what a queue share holds) too -------------------------


def test_send_many_of_a_deque(world, pair):
    from collections import deque

    alpha, beta = pair
    inbox = beta.store("w1").queue("inbox")
    assert alpha["w1"].send_many("inbox@w1.beta", deque([1, 2, 3]), src="out") == 3
    assert world.run_until(lambda: len(inbox.queue) == 3, 5)
