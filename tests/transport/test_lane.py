"""LaneStack over real Unix datagram sockets in a temporary runtime dir."""

from __future__ import annotations

import os
import stat

from flowcast.runtime import RealClock, Scheduler
from flowcast.transport.lane import LaneStack
from flowcast.transport.ports import UxdPort
from flowcast.transport.stack import serve


def _pair(tmp_path):
    run = tmp_path / "run"
    a_port = UxdPort(run, "house1")
    b_port = UxdPort(run, "house2")
    a = LaneStack(a_port, "house1", {"house2": b_port.address})
    b = LaneStack(b_port, "house2", {"house1": a_port.address})
    return a, b


def test_messages_pages_and_order_between_two_yards(tmp_path):
    a, b = _pair(tmp_path)
    try:
        big = os.urandom(3 * 1024 * 1024 + 17)
        outs = [a.send({"n": i}, "house2", stream=i % 2) for i in range(5000)]
        outs.append(a.send_bytes(big, "house2", stream=5))
        outs.append(a.send({"j": 1}, "house2", stream=3, codec="json"))
        got = []
        assert serve([a, b], until=lambda: got.extend(b.receive_many()) or len(got) == len(outs), timeout=20)
        assert all(o.state == "sent" for o in outs)
        for stream in (0, 1):
            assert [m.data["n"] for m in got if m.stream == stream] == list(range(stream, 5000, 2))
        assert [m.data for m in got if m.stream == 5] == [big]
        assert got[-1].remote == "house1"
        mode = stat.S_IMODE(os.stat(a.address).st_mode)
        assert mode == 0o600
        assert stat.S_IMODE(os.stat(tmp_path / "run").st_mode) == 0o700
    finally:
        a.close()
        b.close()


def test_only_known_yards_are_heard(tmp_path):
    a, b = _pair(tmp_path)
    stranger_port = UxdPort(tmp_path / "run", "stranger")
    stranger = LaneStack(stranger_port, "stranger", {"house2": b.address})
    try:
        stranger.send({"sneak": 1}, "house2")
        serve([stranger], timeout=0.05)
        serve([b], until=lambda: b.counts["unknown_yard"] > 0, timeout=5)
        assert b.receive() is None and b.counts["unknown_yard"] >= 1
        # garbage from a known yard's address is counted, not raised
        a.port.send(b"\xf1\x09garbage-garbage-garbage", b.address)
        a.port.send(b"\x00", b.address)
        serve([b], until=lambda: b.counts["malformed"] + b.counts["bad_chunks"] >= 2, timeout=5)
        assert b.counts["internal_errors"] == 0
    finally:
        for s in (a, b, stranger):
            s.close()


def test_a_restarted_yard_is_heard_from_its_first_message(tmp_path):
    a, b = _pair(tmp_path)
    try:
        a.send({"before": 1}, "house2")
        serve([a, b], until=lambda: len(b.inbox) == 1, timeout=5)
        b.receive()
        a.close()
        a = LaneStack(UxdPort(tmp_path / "run", "house1"), "house1", {"house2": b.address})
        a.send({"after": 1}, "house2")
        assert serve([a, b], until=lambda: len(b.inbox) == 1, timeout=5)
        assert b.receive().data == {"after": 1}
    finally:
        a.close()
        b.close()


def test_lane_runs_as_scheduler_micro_threads(tmp_path):
    scheduler = Scheduler(RealClock())
    run = tmp_path / "run"
    a_port = UxdPort(run, "house1", scheduler=scheduler)
    b_port = UxdPort(run, "house2", scheduler=scheduler)
    a = LaneStack(a_port, "house1", {"house2": b_port.address}, scheduler=scheduler)
    b = LaneStack(b_port, "house2", {"house1": a_port.address}, scheduler=scheduler)
    got = []
    b.hooks.add("message", got.append)

    def producer():
        for i in range(2000):
            a.send({"n": i}, "house2")
            if i % 100 == 0:
                yield

    def stopper():
        while len(got) < 2000 and scheduler.clock.now() < 10:
            yield
        scheduler.stop()

    scheduler.enable_wakeup()  # so stop() from a micro-thread ends a blocking wait at once
    scheduler.spawn(producer())
    scheduler.spawn(stopper())
    scheduler.run(until=10)
    a.close()
    b.close()
    scheduler.close()
    assert [m.data["n"] for m in got] == list(range(2000))
