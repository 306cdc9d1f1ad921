"""Routers record share-to-share messages as export events: routed at the source, landed or refused where they end."""

from __future__ import annotations

import pytest

from flowcast.routing import Router
from tests.routing.kit import World

ALLOW_BETA = [{"allow": "write", "estate": "beta"}]
ALLOW_ALPHA = [{"deny": "write", "share": "secret*"}, {"allow": "any", "estate": "alpha"}]


class Sink:
    """What a Recorder's ``message`` is given, as dicts."""

    def __init__(self) -> None:
        self.events: list[dict] = []

    def message(self, kind, msg_id, src, dst, size, latency=None, *, segment=None, lag=None, detail=None, share=None):
        self.events.append({"kind": kind, "id": msg_id, "src": src, "dst": dst, "size": size, "detail": detail, "share": share})

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.events if e["kind"] == kind]


@pytest.fixture
def world():
    return World(seed=5, delay=(0.005, 0.005))


def test_a_message_across_estates_is_routed_at_its_source_and_landed_where_it_ends(world):
    alpha = world.routed_estate("alpha", ["manor", "w1"], policy=ALLOW_BETA)
    beta = world.routed_estate("beta", ["manor", "w1"], policy=ALLOW_ALPHA)
    world.connect(alpha, beta)
    sinks = {name: Sink() for name in ("a.w1", "a.manor", "b.manor", "b.w1")}
    for name, router in (("a.w1", alpha["w1"]), ("a.manor", alpha["manor"]), ("b.manor", beta["manor"]), ("b.w1", beta["w1"])):
        router.set_events(sinks[name])
    inbox = beta.store("w1").queue("inbox")
    for i in range(3):  # one stamp: ids 0, 1, 2 at both ends
        alpha["w1"].send("inbox@w1.beta", {"n": i}, src="out", tag="job")
    assert world.run_until(lambda: len(inbox.queue) == 3, 5)
    routed, landed = sinks["a.w1"].of("routed"), sinks["b.w1"].of("landed")
    assert [e["id"].split(":")[1] for e in routed] == ["0", "1", "2"]
    assert [e["id"] for e in landed] == [e["id"] for e in routed]
    assert {(e["src"], e["dst"]) for e in routed + landed} == {("out/w1/alpha/main", "inbox/w1/beta/main")}
    assert all(e["detail"] == "job" and e["size"] == 4 for e in routed + landed)  # msgpack {"n": i}
    # the manors only passed the parcels on: nothing of theirs
    assert sinks["a.manor"].events == [] and sinks["b.manor"].events == []


def test_a_refusal_is_recorded_where_it_happens_and_its_error_report_is_routed_back(world):
    alpha = world.routed_estate("alpha", ["manor", "w1"], policy=ALLOW_BETA)
    beta = world.routed_estate("beta", ["manor"], policy=ALLOW_ALPHA)
    world.connect(alpha, beta)
    a_w1, b_manor = Sink(), Sink()
    alpha["w1"].set_events(a_w1)
    beta["manor"].set_events(b_manor)
    errors = alpha.store("w1").queue("out.error")
    alpha.store("w1").queue("out")
    alpha["w1"].send("secret@.beta", 1, src="out", tag="poke")
    assert world.run_until(lambda: len(errors.queue) == 1, 5)
    (refused,) = b_manor.of("refused")
    assert refused["src"] == "out/w1/alpha/main" and refused["dst"] == "secret//beta/main"
    assert refused["detail"].startswith("denied: write of 'secret'")
    (report,) = b_manor.of("routed")  # the error report, from beta's manor back to the sender
    assert report["detail"] == "error" and report["dst"] == "out/w1/alpha/main"
    (back,) = a_w1.of("landed")
    assert back["id"] == report["id"] and back["share"] == "out"


def test_a_message_refused_at_landing_carries_its_id(world):
    router = world.routed_estate("alpha", ["manor"])["manor"]
    sink = Sink()
    router.set_events(sink)
    router.store.queue("full", bound=1).push("x")
    router.store.queue("out")
    assert not router.send("full", 1, src="out")
    kinds = [e["kind"] for e in sink.events]
    assert kinds == ["routed", "refused", "routed", "landed"]  # the message, its refusal, the report, its landing
    assert sink.events[1]["id"] == sink.events[0]["id"] and sink.events[1]["detail"].startswith("queue_full")


def test_without_a_sink_the_router_has_no_listeners_and_no_swapped_methods():
    world = World(seed=1)
    router = world.routed_estate("alpha", ["manor"])["manor"]
    router.set_events(Sink())
    assert all(router.hooks.listeners(name) for name in router.hooks.names)
    router.set_events(Sink())  # a new sink replaces the old: one recorder, not two
    assert all(len(router.hooks.listeners(name)) == 1 for name in router.hooks.names)
    router.set_events(None)
    assert all(getattr(router.hooks, name) is None for name in router.hooks.names)  # nothing to pay
    assert not {"_dispatch", "_land", "_refuse"} & set(router.__dict__)  # nothing swapped in, ever


def test_a_recorded_local_read_nests_its_answer_and_both_land():
    router = World(seed=1).routed_estate("alpha", ["manor"])["manor"]
    sink = Sink()
    router.set_events(sink)
    router.store.share("config", {"rate": 5})
    answers = router.store.queue("answers")
    assert router.send("config", None, src="answers", tag="read")
    assert answers.pop()["data"] == {"rate": 5}
    events = [(e["kind"], e["detail"]) for e in sink.events]
    assert events == [("routed", "read"), ("routed", "value"), ("landed", "value"), ("landed", "read")]
    assert sink.events[0]["id"] == sink.events[3]["id"] and sink.events[1]["id"] == sink.events[2]["id"]


def test_a_message_with_header_extensions_is_recorded_routed_and_landed():
    router = World(seed=1).routed_estate("alpha", ["manor"])["manor"]
    sink = Sink()
    router.set_events(sink)
    router.store.queue("inbox")
    assert router.send("inbox", {"n": 1}, tag="t", ext={"id": "m1"})
    assert [e["kind"] for e in sink.events] == ["routed", "landed"] and sink.events[0]["id"] == sink.events[1]["id"]


def test_an_error_report_dropped_because_its_error_queue_is_full_is_recorded_refused():
    router = World(seed=1).routed_estate("alpha", ["manor"])["manor"]
    sink = Sink()
    router.set_events(sink)
    errors = router.store.queue("out.error", bound=1)
    errors.push("old")  # full
    router.store.queue("out")
    assert not router.send("nowhere", 1, src="out")  # no_share: its report overflows out.error
    assert router.counts["errors_overflowed"] == 1 and list(errors.queue) == ["old"]
    kinds = [e["kind"] for e in sink.events]
    assert kinds == ["routed", "refused", "routed", "refused"]  # the report was routed, then dropped
    report, dropped = sink.events[2], sink.events[3]
    assert dropped["id"] == report["id"] and dropped["detail"].startswith("errors_overflowed")
    assert not sink.of("landed")
