"""Message events: what two road stacks record through an event sink, over a lossy simulated network."""

from __future__ import annotations

from collections import Counter
from typing import Any

from flowcast.transport.keep import RemoteRecord, Status

from .roadkit import World

DELAY = 0.01
COUNT = 200


class ListSink:
    """Collects what a stack records, as the export Recorder would receive it.

    It imports nothing from the transport: a sink only has to have the shape
    of ``flowcast.transport.stack.EventSink``.
    """

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.presences: list[tuple[str, str]] = []

    def message(self, kind, msg_id, src, dst, size, latency=None, *, segment=None, lag=None, detail=None, share=None):
        self.messages.append(
            {"kind": kind, "id": msg_id, "src": src, "dst": dst, "size": size, "latency": latency, "segment": segment, "detail": detail}
        )

    def presence(self, remote, status, detail=None):
        self.presences.append((remote, status))

    def kinds(self) -> Counter[str]:
        return Counter(m["kind"] for m in self.messages)

    def ids(self, kind: str) -> list[str]:
        return [m["id"] for m in self.messages if m["kind"] == kind]


def _pair(world: World, a: ListSink | None, b: ListSink | None, **options):
    alpha = world.estate("alpha", events=a, **options)
    beta = world.estate("beta", events=b, **options)
    alpha.join("beta")
    assert world.run_until(lambda: alpha.is_allowed("beta") and beta.is_allowed("alpha"), 10)
    return alpha, beta


def test_lossy_exchange_records_every_message_on_both_sides() -> None:
    world = World(seed=5, delay=DELAY)
    sent_side, recv_side = ListSink(), ListSink()
    alpha, beta = _pair(world, sent_side, recv_side, datagram_size=1200)
    world.net.link("alpha", "beta", loss=0.2)  # after the handshake: resends follow
    sizes = [5000 if i % 5 == 0 else 200 for i in range(COUNT)]  # some messages span segments
    outs = [alpha.send_bytes(bytes(size), "beta", stream=i % 2, timeout=None) for i, size in enumerate(sizes)]
    assert world.run_until(lambda: all(o.delivered for o in outs), 60)
    assert len(beta.receive_many()) == COUNT

    kinds = sent_side.kinds()
    assert kinds["sent"] == kinds["acknowledged"] == COUNT
    assert kinds["resent"] >= 1
    assert recv_side.kinds()["received"] == recv_side.kinds()["delivered"] == COUNT
    assert recv_side.kinds()["buffered"] >= 1 and recv_side.kinds()["segment-missed"] >= 1
    assert "denied" not in kinds and "denied" not in recv_side.kinds()

    # ids agree on both sides, in each stream's order, and are unique
    sent_ids = sent_side.ids("sent")
    assert len(set(sent_ids)) == COUNT
    assert set(recv_side.ids("delivered")) == set(sent_ids) == set(sent_side.ids("acknowledged"))
    for stream in (0, 1):
        in_stream = [i for i in recv_side.ids("delivered") if i.split(":")[2] == str(stream)]
        assert [int(i.split(":")[3]) for i in in_stream] == list(range(COUNT // 2))
    # every missed or resent id belongs to a message that was sent
    assert set(recv_side.ids("segment-missed")) <= set(sent_ids)
    assert set(sent_side.ids("resent")) <= set(sent_ids)

    # same route on both sides; sizes as sent; acknowledgement latency covers the trip there and back
    first = next(m for m in sent_side.messages if m["kind"] == "sent")
    delivered = next(m for m in recv_side.messages if m["kind"] == "delivered" and m["id"] == first["id"])
    assert (first["src"], first["dst"]) == (delivered["src"], delivered["dst"]) == (("", "", "alpha", 0), ("", "", "beta", 0))
    by_id = {m["id"]: m["size"] for m in sent_side.messages if m["kind"] == "sent"}
    assert all(by_id[m["id"]] == m["size"] for m in recv_side.messages if m["kind"] == "delivered")
    latencies = [m["latency"] for m in sent_side.messages if m["kind"] == "acknowledged"]
    assert min(latencies) >= 2 * DELAY - 1e-9
    assert all(m["segment"] is not None for m in sent_side.messages if m["kind"] == "resent")

    assert ("beta", "alive") in sent_side.presences and ("alpha", "alive") in recv_side.presences


def test_no_sink_records_nothing_and_a_sink_can_come_and_go() -> None:
    world = World(seed=6, delay=DELAY)
    alpha, beta = _pair(world, None, None)
    assert alpha.event_sink is None
    assert alpha.remote("beta").session.link.watch is None
    assert all(alpha.hooks.listeners(name) == () for name in alpha.hooks.names)  # nothing installed, nothing paid
    assert "_submit" not in vars(alpha) and "_completed" not in vars(alpha)  # no method swapped in either

    late = ListSink()
    alpha.set_events(late)
    beta.set_events(late)
    out = alpha.send({"n": 1}, "beta")
    assert world.run_until(lambda: out.delivered, 5)
    assert Counter(m["kind"] for m in late.messages) == {"sent": 1, "received": 1, "delivered": 1, "acknowledged": 1}

    alpha.set_events(None)
    beta.set_events(None)
    assert alpha.remote("beta").session.link.watch is None and "_submit" not in vars(alpha)
    assert all(alpha.hooks.listeners(name) == () for name in alpha.hooks.names)
    out = alpha.send({"n": 2}, "beta")
    assert world.run_until(lambda: out.delivered, 5)
    assert len(late.messages) == 4


def test_undeliverable_message_is_denied_with_its_reason() -> None:
    world = World(seed=7, delay=DELAY)
    sink = ListSink()
    alpha, beta = _pair(world, sink, None)
    world.net.link("alpha", "beta", loss=1.0)
    out = alpha.send({"n": 1}, "beta", timeout=0.5)
    assert world.run_until(lambda: out.done, 5)
    assert out.state == "failed"
    denied = [m for m in sink.messages if m["kind"] == "denied"]
    assert len(denied) == 1 and denied[0]["id"] == sink.ids("sent")[0] and denied[0]["detail"] == "timeout"


def test_a_message_that_never_had_a_session_is_denied_on_its_route() -> None:
    world = World(seed=9, delay=DELAY)
    sink = ListSink()
    alpha = world.estate("alpha", events=sink, allow_timeout=0.5)
    beta = world.estate("beta")
    # alpha trusts beta's keys, but beta is not listening where alpha looks: no allow can succeed
    alpha.add_remote(RemoteRecord("beta", "beta", 0, beta.keys.verkey, beta.keys.pubkey, Status.ACCEPTED), "elsewhere")
    out = alpha.send({"n": 1}, "beta", timeout=1.0)
    assert world.run_until(lambda: out.done, 5) and out.state == "failed"
    (denied,) = [m for m in sink.messages if m["kind"] == "denied"]
    assert "sent" not in sink.kinds()
    assert (denied["src"], denied["dst"]) == (("", "", "alpha", 0), ("", "", "beta", 0))
    assert denied["id"].startswith("alpha:-:0:") and denied["detail"].startswith("no session")


def test_unreliable_messages_match_too() -> None:
    world = World(seed=8, delay=DELAY)
    a, b = ListSink(), ListSink()
    alpha, beta = _pair(world, a, b)
    for i in range(5):
        alpha.send({"n": i}, "beta", stream=3, reliable=False)
    assert world.run_until(lambda: len(beta.inbox) == 5, 5)
    assert a.ids("sent") == b.ids("delivered") == [f"{i.rsplit(':', 1)[0]}:u{n}" for n, i in enumerate(a.ids("sent"))]
    assert "acknowledged" not in a.kinds()


def test_a_lane_records_sent_and_delivered_under_matching_ids(tmp_path) -> None:
    from flowcast.transport.lane import LaneStack
    from flowcast.transport.ports import UxdPort
    from flowcast.transport.stack import serve

    run = tmp_path / "run"
    a_port, b_port = UxdPort(run, "house1"), UxdPort(run, "house2")
    a_sink, b_sink = ListSink(), ListSink()
    a = LaneStack(a_port, "house1", {"house2": b_port.address}, events=a_sink)
    b = LaneStack(b_port, "house2", {"house1": a_port.address}, events=b_sink)
    try:
        outs = [a.send({"n": i}, "house2", stream=i % 2) for i in range(50)]
        outs.append(a.send_bytes(bytes(300_000), "house2", stream=2))  # paged
        got: list = []
        assert serve([a, b], until=lambda: got.extend(b.receive_many()) or len(got) == len(outs), timeout=10)
        assert all(o.state == "sent" for o in outs)
        assert a_sink.kinds() == {"sent": 51}  # a lane acknowledges nothing
        assert b_sink.kinds() == {"received": 51, "delivered": 51}
        assert sorted(a_sink.ids("sent")) == sorted(b_sink.ids("delivered"))
        assert all(i.startswith(f"house1:{a.boot:08x}:") for i in a_sink.ids("sent"))
        paged = [m for m in b_sink.messages if m["kind"] == "delivered" and m["size"] == 300_000]
        assert len(paged) == 1 and (paged[0]["src"], paged[0]["dst"]) == (("", "house1", "", 2), ("", "house2", "", 2))
        assert not a._born  # nothing left waiting for a completion
    finally:
        a.close()
        b.close()
