"""A publish from a house without the cache ends, on virtual time: resent by id, refused ``timeout`` at the bound.

abc's w1 publishes through the manor (the cache's house) over the
simulated lane.  A gate in front of the manor's ``cast.pub`` handler stands
for what the lane cannot see: a cache house that took a message and died
before storing it (the gate drops it), or whose answer was lost.
"""

from __future__ import annotations

import msgpack
import pytest

from flowcast.cast import CastConfig, CastService
from flowcast.cast.remote import WATCH, RemotePublishes
from flowcast.cast.wire import PUB, PUBACK
from flowcast.routing import Refused, Route
from flowcast.transport.lane import LaneStack
from tests.cast.flowkit import FlowWorld
from tests.cast.kit import Cast

TIMEOUT, RESEND = 10.0, 1.0


class Gate:
    """Between the manor's lane and its publisher: each ``cast.pub`` is noted, then dropped while ``drop`` lasts."""

    def __init__(self, cast: Cast, drop: int = 0) -> None:
        self.router = cast.abc["manor"]
        self.publisher = cast.pub.publisher
        self.drop = drop
        self.seen: list[tuple[float, bytes]] = []
        self.router.unhandle(PUB)
        self.router.handle(PUB, self._on_pub)

    def _on_pub(self, landing) -> None:
        self.seen.append((self.router.scheduler.clock.now(), landing.data["id"]))
        if self.drop:
            self.drop -= 1
            return
        self.publisher._on_pub(landing)


def _w1(cast: Cast, **config) -> CastService:
    settings = {"publish_timeout": TIMEOUT, "publish_resend": RESEND, **config}
    return CastService(cast.abc["w1"], config=CastConfig(**settings))


def _stored(cast: Cast) -> list:
    return list(cast.cache.read(0, limit=1000))


def test_a_publish_nobody_answers_is_resent_on_a_back_off_then_refused_timeout_at_the_bound(tmp_path):
    cast = Cast(tmp_path)
    gate = Gate(cast, drop=10**6)  # the cache's house takes everything and never stores it
    w1 = _w1(cast)
    start = cast.clock()
    ticket = w1.publish("abc/messages/w1/0", b"lost")
    assert not cast.run_until(lambda: ticket.done, TIMEOUT - 0.01)  # open until the bound...
    assert cast.run_until(lambda: ticket.done, WATCH + 0.01)  # ...and ended by it, a look later at most
    assert TIMEOUT <= cast.clock() - start <= TIMEOUT + WATCH + 0.01
    assert ticket.error is not None and str(ticket.error).startswith("timeout:") and ticket.error.kind == "publish_refused"
    # sent at 0, then after 1, 2, 4 and 8 s without an answer (the back-off caps at 8x): 0, 1, 3, 7 within 10 s
    times = [round(at - start, 1) for at, id in gate.seen]
    assert all(id == ticket.id for _, id in gate.seen)
    assert len(times) == 4 and all(abs(a - b) <= WATCH + 0.01 for a, b in zip(times, [0, 1, 3, 7])), times
    assert w1.remote.counts["timeouts"] == 1 and not w1.remote.open
    cast.run_until(lambda: False, 20)
    assert len(gate.seen) == 4  # an ended ticket is never sent again


def test_a_publish_the_cache_house_dropped_is_resent_and_stored_once(tmp_path):
    cast = Cast(tmp_path)
    gate = Gate(cast, drop=2)  # the first two arrivals are lost in the house
    w1 = _w1(cast)
    ticket = w1.publish("abc/messages/w1/0", b"again")
    assert cast.run_until(lambda: ticket.done, TIMEOUT)
    assert ticket.error is None and ticket.seq == 1 and not ticket.duplicate
    assert [id for _, id in gate.seen] == [ticket.id] * 3
    assert [(row.id, row.data) for row in _stored(cast)] == [(ticket.id, b"again")]


class SlowGate(Gate):
    """A cache house with a backlog: it takes each publish ``every`` seconds after the one before, in order."""

    def __init__(self, cast: Cast, every: float) -> None:
        super().__init__(cast)
        self.every, self.free_at = every, 0.0

    def _on_pub(self, landing) -> None:
        scheduler = self.router.scheduler
        self.seen.append((scheduler.clock.now(), landing.data["id"]))
        self.free_at = max(self.free_at, scheduler.clock.now()) + self.every
        scheduler.call_at(self.free_at, self.publisher._on_pub, landing)


def test_a_backlog_the_cache_house_answers_in_order_gets_no_copies_but_one_it_skipped_does(tmp_path):
    cast = Cast(tmp_path)
    gate = SlowGate(cast, every=0.5)  # ten publishes: the last answered after 5 s, past four resend waits
    w1 = _w1(cast)
    tickets = [w1.publish(f"abc/messages/w1/{i}", b"%d" % i) for i in range(10)]
    assert cast.run_until(lambda: all(t.done for t in tickets), TIMEOUT - 1)
    assert not any(t.error or t.duplicate for t in tickets)
    assert len(gate.seen) == 10 and w1.remote.counts["resent"] == 0 and w1.remote.counts["backlog_waits"] > 0
    skipping = Cast(tmp_path / "again")
    gate = Gate(skipping, drop=1)  # the house loses the first and answers the two after it
    w1 = _w1(skipping)
    tickets = [w1.publish(f"abc/messages/w1/{i}", b"%d" % i) for i in range(3)]
    assert skipping.run_until(lambda: all(t.done for t in tickets), RESEND + WATCH + 0.1)  # overtaken: resent at its first due
    assert not any(t.error for t in tickets) and [id for _, id in gate.seen].count(tickets[0].id) == 2


def test_a_lost_answer_is_asked_again_and_the_resend_is_acknowledged_as_a_duplicate(tmp_path):
    cast = Cast(tmp_path)
    w1 = _w1(cast)
    router, lost = cast.abc["w1"], []

    def lossy(landing) -> None:  # the first puback goes missing on its way back
        if not lost:
            lost.append(landing.data)
            return
        w1._on_puback(landing)

    router.unhandle(PUBACK)
    router.handle(PUBACK, lossy)
    ticket = w1.publish("abc/messages/w1/0", b"stored")
    assert cast.run_until(lambda: ticket.done, TIMEOUT)
    assert lost and lost[0]["duplicate"] is False
    assert ticket.error is None and ticket.duplicate and ticket.seq == lost[0]["seq"]
    assert len(_stored(cast)) == 1


def test_a_restart_of_the_cache_house_resends_what_it_had_at_once_not_after_the_back_off(tmp_path):
    cast = Cast(tmp_path)
    gate = Gate(cast, drop=5)  # the dying incarnation takes five publishes with it
    w1 = _w1(cast, publish_timeout=60.0, publish_resend=30.0)  # no back-off resend within this test
    tickets = [w1.publish(f"abc/messages/w1/{i}", b"%d" % i) for i in range(5)]
    assert cast.run_until(lambda: len(gate.seen) == 5, 5)
    assert not cast.run_until(lambda: any(t.done for t in tickets), 2)
    manor = cast.abc["manor"]
    manor.lane.close()  # the cache's house restarts: a new lane incarnation on the same socket
    restarted = cast.clock()
    manor.attach_lane(LaneStack(cast.world.net.port("abc/manor"), "manor", {"w1": "abc/w1"},
                                scheduler=cast.world.scheduler, acks=True))
    assert cast.run_until(lambda: all(t.done for t in tickets), 2)
    assert cast.clock() - restarted < 1.0  # its next look, not the 30 s back-off
    assert all(t.error is None and not t.duplicate for t in tickets)
    assert sorted(row.id for row in _stored(cast)) == sorted(t.id for t in tickets)
    assert w1.remote.counts["restart_resends"] == 5


def test_a_lane_that_cannot_take_the_publish_is_no_refusal_while_time_remains(tmp_path):
    """A routed error that names no publish (here ``no_yard``: the cache's yard is unknown to the lane)."""
    cast = Cast(tmp_path)
    w1 = CastService(cast.abc["w1"], config=CastConfig(publish_timeout=TIMEOUT, publish_resend=RESEND), cache_yard="gone")
    ticket = w1.publish("abc/messages/w1/0", b"x")
    assert not cast.run_until(lambda: ticket.done, TIMEOUT - 0.01)
    assert cast.run_until(lambda: ticket.done, WATCH + 0.01) and str(ticket.error).startswith("timeout:")
    # paced by the back-off, not by each look: sent at 0, 1, 2, 3... (each failure brings it back to the first wait)
    assert cast.abc["w1"].counts["no_yard"] <= TIMEOUT / RESEND + 1
    assert w1.remote.counts["transport_errors"] == cast.abc["w1"].counts["no_yard"]


def test_a_refusal_from_the_cache_is_final_and_an_error_about_another_publish_touches_no_ticket(tmp_path):
    cast = Cast(tmp_path, max_bytes=80)  # two small ones fit, a large one does not
    w1 = _w1(cast)
    small = w1.publish("abc/messages/w1/0", b"s")
    assert cast.run_until(lambda: small.done, 5) and small.error is None
    full = w1.publish("abc/messages/w1/1", b"x" * 100)
    waiting = w1.publish("abc/messages/w1/2", b"w")
    assert cast.run_until(lambda: full.done, 5) and "cache_full" in str(full.error)
    errors = cast.abc.store("w1").queue("cast.publish.error")
    errors.push({"data": {"id": b"\x07" * 16, "kind": "cache_full", "reason": "not yours"}})  # a late one, of no open ticket
    assert cast.run_until(lambda: waiting.done, 5) and waiting.error is None


def test_open_publishes_are_bounded_and_an_ended_ticket_lets_go_of_its_data(tmp_path):
    cast = Cast(tmp_path)
    Gate(cast, drop=10**6)
    remote = RemotePublishes(cast.abc["w1"], Route("cast", "manor", "abc", ""), "cast.publish", timeout=2.0, resend=0.5, max_open=2)
    first = remote.publish(b"\x01" * 16, {"id": b"\x01" * 16, "name": "abc/m/1", "publisher": "", "data": b"1"})
    assert remote.publish(b"\x01" * 16, first.message) is first  # the same id while open: one ticket
    remote.publish(b"\x02" * 16, {"id": b"\x02" * 16, "name": "abc/m/2", "publisher": "", "data": b"2"})
    with pytest.raises(Refused) as refused:
        remote.publish(b"\x03" * 16, {"id": b"\x03" * 16, "name": "abc/m/3", "publisher": "", "data": b"3"})
    assert refused.value.kind == "busy"
    assert cast.run_until(lambda: first.done, 3) and first.message == {} and not remote.open
    with pytest.raises(ValueError):
        RemotePublishes(cast.abc["w1"], Route("cast", "manor", "abc", ""), "cast.publish", timeout=1.0, resend=1.0)


FLOW = """house w1
framer pub be active first run
  frame run
    do queue to outbox at enter
    do queue to acks at enter
    do cast publish from outbox to acks with name "abc/messages/w1/{id}"
"""


def test_a_flow_gets_a_timed_out_publish_back_with_its_data_and_publishes_again(tmp_path):
    w = FlowWorld(tmp_path, {("abc", "w1"): FLOW}, cast={"publish_timeout": 4.0, "publish_resend": 1.0})
    store = w.store("abc", "w1")
    outbox, acks, errors = store.queue("outbox"), store.queue("acks"), store.queue("outbox.error")
    manor = w.abc["manor"]
    manor.unhandle(PUB)
    manor.handle(PUB, lambda landing: None)  # a cache house that never answers
    outbox.push({"n": 1})
    assert w.run_until(lambda: len(errors.queue) == 1, 10)
    report = errors.queue.popleft()
    assert report["reason"] == "timeout" and msgpack.unpackb(report["data"]) == {"n": 1}
    publisher = w.services[("abc", "manor")].publisher
    manor.unhandle(PUB)
    manor.handle(PUB, publisher._on_pub)  # the cache answers again
    outbox.push(msgpack.unpackb(report["data"]))  # the flow publishes it again: nothing in flight holds it back
    assert w.run_until(lambda: len(acks.queue) == 1, 10)
    assert [msgpack.unpackb(row.data) for row in w.cache.read(0)] == [{"n": 1}]
