"""Acknowledged lanes (LaneStack(acks=True)): delivery states, yard restarts, absent yards.

A message is "delivered" only once the receiving yard's stack handed it to
its application; a yard that dies and comes back (new boot id, same socket
path) gets everything not yet acknowledged, in order, and nothing its
earlier incarnation acknowledged.  Every wait is on a condition with a
deadline.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flowcast.transport.lane import LaneStack
from flowcast.transport.ports import UxdPort
from flowcast.transport.stack import serve
from tests.transport.roadkit import World

ROOT = Path(__file__).resolve().parents[2]


def _lane(run, name: str, peer: str, **options) -> LaneStack:
    return LaneStack(UxdPort(run, name), name, {peer: os.path.join(run, peer)}, acks=True, **options)


def _check_restart(outs, delivered_by, first_got, second_got, old_boot, new_boot, stream_of=lambda n: 0) -> None:
    """The contract across a receiver restart, for messages numbered 0..len(outs)-1.

    * every message ends delivered;
    * one the first incarnation acknowledged was handed to its application
      and is never sent to the second;
    * one the second acknowledged was handed to the second's application;
    * the second got what it got in order per stream.
    """
    assert all(o.state == "delivered" for o in outs), {o.state for o in outs}
    first, second = set(first_got), set(second_got)
    by_old = {n for n, boot in delivered_by.items() if boot == old_boot}
    by_new = {n for n, boot in delivered_by.items() if boot == new_boot}
    assert by_old | by_new == set(range(len(outs)))
    assert by_old <= first
    assert by_new <= second
    assert not by_old & second, "a message the old incarnation acknowledged was sent again"
    assert by_new, "nothing was left for the new incarnation: the crash was not mid-stream"
    streams: dict[int, list[int]] = {}
    for n in second_got:
        streams.setdefault(stream_of(n), []).append(n)
    for got in streams.values():
        assert got == sorted(got)
        assert len(got) == len(set(got))


def test_delivered_only_once_the_receiving_application_has_it(tmp_path):
    run = tmp_path / "run"
    a = _lane(run, "house1", "house2")
    b = _lane(run, "house2", "house1")
    try:
        assert a.default_timeout is None  # a message waits for its yard unless told otherwise
        assert serve([a, b], until=lambda: a.peer_boot("house2") and b.peer_boot("house1"), timeout=5)
        outs = [a.send({"n": i}, "house2", stream=i % 3) for i in range(3000)]
        big = a.send_bytes(os.urandom(2_000_003), "house2", stream=7)
        loose = a.send({"loose": 1}, "house2", reliable=False)
        # The sender alone: its data waits in the receiver's socket, unacknowledged.
        sent_before = a.port.counts["sent"]
        serve([a], until=lambda: a.port.counts["sent"] > sent_before and a.queued_datagrams, timeout=5)
        assert a.port.counts["sent"] > sent_before
        assert all(o.state == "queued" for o in outs) and big.state == "queued"
        seen_at_handover = []

        def on_message(message):
            if isinstance(message.data, dict) and "n" in message.data:
                seen_at_handover.append(outs[message.data["n"]].state)

        b.hooks.add("message", on_message)
        assert serve([a, b], until=lambda: all(o.done for o in outs) and big.done, timeout=20)
        assert {o.state for o in outs} == {"delivered"} and big.state == "delivered"
        assert loose.state == "sent"  # fire-and-forget on an acknowledged lane is still that
        assert len(seen_at_handover) == 3000 and set(seen_at_handover) == {"queued"}
        assert a.pending() == 0
        assert a.peer_boot("house2") == b.boot and b.peer_boot("house1") == a.boot
    finally:
        a.close()
        b.close()


def test_inbox_delivery_counts_and_window_bounds_the_sender(tmp_path):
    run = tmp_path / "run"
    a = _lane(run, "house1", "house2")
    b = _lane(run, "house2", "house1", receive_window=256 * 1024)
    try:
        outs = [a.send_bytes(bytes(1000), "house2") for _ in range(6000)]  # 6 MB against a 256 KiB window
        # Nobody takes b's inbox: the sender stops at the window (the 1 MiB a
        # sender assumes before the first ACK, then what b advertises), and
        # what sits in the inbox counts as delivered.
        serve([a, b], until=lambda: b.inbox_bytes >= 200_000 and not a.queued_datagrams, timeout=10)
        serve([a, b], timeout=0.2)
        assert b.inbox_bytes <= (1 << 20) + 256 * 1024
        delivered = sum(o.state == "delivered" for o in outs)
        assert 0 < delivered <= len(b.inbox) < 6000
        got = []
        assert serve([a, b], until=lambda: got.extend(b.receive_many()) or all(o.done for o in outs), timeout=20)
        assert {o.state for o in outs} == {"delivered"}
    finally:
        a.close()
        b.close()


def test_a_receiver_that_dies_mid_stream_gets_the_rest_from_its_next_incarnation(tmp_path):
    """In-process crash: b's stack and socket vanish with datagrams unread, a new b binds the path."""
    run = tmp_path / "run"
    a = _lane(run, "house1", "house2")
    b = _lane(run, "house2", "house1")
    delivered_by: dict[int, int | None] = {}
    number: dict = {}  # Outgoing -> its message number
    a.hooks.add("done", lambda o: delivered_by.__setitem__(number[o], a.peer_boot("house2")) if o.state == "delivered" else None)
    first_got: list[int] = []
    second_got: list[int] = []
    total = 20_000
    outs = []
    try:

        def produce(limit: int) -> None:
            while len(outs) < min(limit, total):
                n = len(outs)
                out = a.send_bytes(n.to_bytes(4, "big") + bytes(200), "house2", stream=n % 4)
                number[out] = n
                outs.append(out)
            a.flush()  # serve() waits in select next: what until() queued must be out first

        b.hooks.add("message", lambda m: first_got.append(int.from_bytes(m.data[:4], "big")))
        assert serve([a, b], until=lambda: produce(len(outs) + 300) or len(first_got) >= 5000, timeout=20)
        produce(len(outs) + 2000)
        a.service()  # datagrams into b's socket that b will never read
        a.service()
        old_boot = b.boot
        b.close()  # the crash: the unread socket buffer goes with it
        produce(len(outs) + 2000)
        serve([a], until=lambda: a.port.counts["unreachable"] > 0 or not a.pending(), timeout=5)
        assert a.pending() > 0
        b = _lane(run, "house2", "house1")
        b.hooks.add("message", lambda m: second_got.append(int.from_bytes(m.data[:4], "big")))
        assert serve([a, b], until=lambda: produce(len(outs) + 500) or (len(outs) == total and all(o.done for o in outs)), timeout=30)
        _check_restart(outs, delivered_by, first_got, second_got, old_boot, b.boot, stream_of=lambda n: n % 4)
        assert a.counts["yard_restarts"] == 1 and a.counts["carried_to_new_boot"] > 0
    finally:
        a.close()
        b.close()


def test_a_yard_absent_at_first_is_probed_with_back_off_then_served(tmp_path):
    run = tmp_path / "run"
    a = _lane(run, "house1", "house2")
    b = None
    try:
        outs = [a.send({"n": i}, "house2") for i in range(100)]
        timed = a.send({"late": 1}, "house2", timeout=0.3)
        start = time.monotonic()
        serve([a], until=lambda: timed.done, timeout=5)
        assert timed.state == "failed" and timed.reason == "timeout"
        serve([a], timeout=0.6)
        elapsed = time.monotonic() - start
        # HELLO probes only (no data to a yard never heard from), with back-off: a handful, not a busy loop
        probes = a.port.counts["unreachable"]
        assert 2 <= probes <= 12, (probes, elapsed)
        assert all(o.state == "queued" for o in outs)
        b = _lane(run, "house2", "house1")
        got = []
        assert serve([a, b], until=lambda: got.extend(b.receive_many()) or all(o.done for o in outs), timeout=10)
        assert {o.state for o in outs} == {"delivered"}
        assert [m.data["n"] for m in got] == list(range(100))  # the failed one left no gap
    finally:
        a.close()
        if b is not None:
            b.close()


def test_a_restarted_sender_starts_a_fresh_link(tmp_path):
    run = tmp_path / "run"
    a = _lane(run, "house1", "house2")
    b = _lane(run, "house2", "house1")
    try:
        outs = [a.send({"n": i}, "house2") for i in range(50)]
        assert serve([a, b], until=lambda: all(o.done for o in outs), timeout=5)
        a.close()
        a = _lane(run, "house1", "house2")
        again = [a.send({"again": i}, "house2") for i in range(50)]
        got = []
        assert serve([a, b], until=lambda: got.extend(b.receive_many()) or all(o.done for o in again), timeout=5)
        assert {o.state for o in again} == {"delivered"}
        assert [m.data.get("again") for m in got if "again" in m.data] == list(range(50))
        assert b.peer_boot("house1") == a.boot
    finally:
        a.close()
        b.close()


def test_raw_and_acknowledged_yards_do_not_mix(tmp_path):
    run = tmp_path / "run"
    a = _lane(run, "house1", "house2")
    b = LaneStack(UxdPort(run, "house2"), "house2", {"house1": os.path.join(run, "house1")})
    try:
        out = a.send({"x": 1}, "house2")
        b.send({"y": 1}, "house1")
        serve([a, b], until=lambda: a.counts["lane_mode_mismatch"] and b.counts["lane_mode_mismatch"], timeout=5)
        assert out.state == "queued" and not a.inbox and not b.inbox
    finally:
        a.close()
        b.close()


def test_events_of_an_acknowledged_lane_match_across_a_restart(tmp_path):
    from tests.transport.test_events import ListSink

    run = tmp_path / "run"
    a_sink, b_sink = ListSink(), ListSink()
    a = _lane(run, "house1", "house2", events=a_sink)
    b = _lane(run, "house2", "house1", events=b_sink)
    try:
        outs = [a.send({"n": i}, "house2", stream=i % 2) for i in range(40)]
        outs.append(a.send_bytes(bytes(300_000), "house2", stream=2))  # paged
        assert serve([a, b], until=lambda: all(o.done for o in outs), timeout=10)
        b.receive_many()
        assert a_sink.kinds() == {"sent": 41, "acknowledged": 41}
        assert b_sink.kinds() == {"received": 41, "delivered": 41}
        assert sorted(a_sink.ids("sent")) == sorted(b_sink.ids("delivered"))
        tag = f"house1:{a.boot:08x}{b.boot:08x}:"
        assert all(i.startswith(tag) for i in a_sink.ids("sent"))
        b.close()
        b_sink2 = ListSink()
        b = _lane(run, "house2", "house1", events=b_sink2)
        later = [a.send({"later": i}, "house2") for i in range(5)]
        assert serve([a, b], until=lambda: all(o.done for o in later), timeout=10)
        assert b_sink2.kinds() == {"received": 5, "delivered": 5}
        new_tag = f"house1:{a.boot:08x}{b.boot:08x}:"
        assert sorted(i for i in a_sink.ids("sent") if i.startswith(new_tag)) == sorted(b_sink2.ids("delivered"))
        assert not a._born
    finally:
        a.close()
        b.close()


def test_acknowledged_lane_runs_as_scheduler_micro_threads(tmp_path):
    from flowcast.runtime import RealClock, Scheduler

    scheduler = Scheduler(RealClock())
    run = tmp_path / "run"
    a = LaneStack(UxdPort(run, "house1", scheduler=scheduler), "house1", {"house2": os.path.join(run, "house2")}, scheduler=scheduler, acks=True)
    b = LaneStack(UxdPort(run, "house2", scheduler=scheduler), "house2", {"house1": os.path.join(run, "house1")}, scheduler=scheduler, acks=True)
    got = []
    b.hooks.add("message", got.append)
    outs = []

    def producer():
        for i in range(2000):
            outs.append(a.send({"n": i}, "house2"))
            if i % 100 == 0:
                yield

    def stopper():
        while not (len(outs) == 2000 and outs[-1].done) and scheduler.clock.now() < 10:  # one stream: done in order
            yield
        scheduler.stop()

    scheduler.enable_wakeup()
    scheduler.spawn(producer())
    scheduler.spawn(stopper())
    scheduler.run(until=10)
    a.close()
    b.close()
    scheduler.close()
    assert [m.data["n"] for m in got] == list(range(2000))
    assert {o.state for o in outs} == {"delivered"}


# -- a real receiver process, killed with SIGKILL and restarted ---------------------------------

_CHILD = r"""
import os, sys
from flowcast.transport.lane import LaneStack
from flowcast.transport.ports import UxdPort
from flowcast.transport.stack import serve
run, log = sys.argv[1], sys.argv[2]
fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
lane = LaneStack(UxdPort(run, "worker"), "worker", {"manor": os.path.join(run, "manor")}, acks=True)
# Handed to the application = written to the log (before the stack can acknowledge it).
lane.hooks.add("message", lambda m: os.write(fd, b"%d\n" % int.from_bytes(m.data[:4], "big")))
os.write(fd, b"boot %d\n" % lane.boot)
serve([lane], timeout=60)
"""


def _spawn(run, log) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", _CHILD, str(run), str(log)], env=env, cwd=str(ROOT))


def _numbers(log: Path) -> list[int]:
    if not log.exists():
        return []
    return [int(line) for line in log.read_text().splitlines() if line.isdigit()]


def test_a_worker_killed_with_sigkill_and_restarted_loses_nothing_acknowledged(tmp_path):
    run = tmp_path / "run"
    manor = _lane(run, "manor", "worker")
    logs = [tmp_path / "worker-1.log", tmp_path / "worker-2.log"]
    delivered_by: dict[int, int | None] = {}
    number: dict = {}  # Outgoing -> its message number
    manor.hooks.add("done", lambda o: delivered_by.__setitem__(number[o], manor.peer_boot("worker")) if o.state == "delivered" else None)
    total = 30_000
    outs = []
    procs = []

    def produce(limit: int) -> None:
        while len(outs) < min(limit, total):
            n = len(outs)
            out = manor.send_bytes(n.to_bytes(4, "big") + bytes(100), "worker")
            number[out] = n
            outs.append(out)
        manor.flush()  # serve() waits in select next: what until() queued must be out first

    try:
        procs.append(_spawn(run, logs[0]))
        assert serve([manor], until=lambda: manor.peer_boot("worker") is not None, timeout=20), "worker 1 never announced itself"
        old_boot = manor.peer_boot("worker")
        # Stream until the worker has handed a good part to its application, then kill it mid-stream.
        assert serve([manor], until=lambda: produce(len(outs) + 200) or len(_numbers(logs[0])) >= 4000, timeout=20), (
            f"{len(outs)} sent, {sum(o.done for o in outs)} done, {len(_numbers(logs[0]))} logged, {manor.counts}, {manor.port.counts}"
        )
        produce(len(outs) + 3000)
        manor.service()
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(timeout=10)
        assert manor.pending() > 0, "the worker took everything before it was killed"
        # While it is down, the manor keeps its messages (and new ones).
        produce(len(outs) + 3000)
        serve([manor], until=lambda: manor.port.counts["unreachable"] > 0, timeout=5)
        procs.append(_spawn(run, logs[1]))  # the supervisor's restart: same yard, same path, new boot
        assert serve(
            [manor],
            until=lambda: produce(len(outs) + 500) or (len(outs) == total and all(o.done for o in outs)),
            timeout=30,
        ), f"{sum(o.done for o in outs)} of {len(outs)} done"
        new_boot = manor.peer_boot("worker")
        assert new_boot not in (None, old_boot)
        _check_restart(outs, delivered_by, _numbers(logs[0]), _numbers(logs[1]), old_boot, new_boot)
    finally:
        manor.close()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)


# -- the simulated network -------------------------------------------------------------------


@pytest.mark.parametrize("conditions", [{}, {"loss": 0.05, "reorder": 0.05, "duplicate": 0.02, "delay": (0.0001, 0.002)}])
def test_simulated_lane_survives_a_receiver_restart(conditions):
    world = World(seed=11, **conditions)
    sched = world.scheduler
    net = world.net

    def lane(name: str, peer: str) -> LaneStack:
        return LaneStack(net.port(f"run/{name}"), name, {peer: f"run/{peer}"}, scheduler=sched, acks=True)

    a = lane("house1", "house2")
    b = lane("house2", "house1")
    delivered_by: dict[int, int | None] = {}
    number: dict = {}  # Outgoing -> its message number
    a.hooks.add("done", lambda o: delivered_by.__setitem__(number[o], a.peer_boot("house2")) if o.state == "delivered" else None)
    first_got: list[int] = []
    second_got: list[int] = []
    b.hooks.add("message", lambda m: first_got.append(m.data["n"]))
    outs = []

    def produce(count: int) -> None:
        for _ in range(count):
            n = len(outs)
            out = a.send({"n": n, "pad": "x" * 100}, "house2", stream=n % 2)
            number[out] = n
            outs.append(out)

    produce(3000)
    assert world.run_until(lambda: len(first_got) >= 1000, 10)
    produce(2000)
    world.run_for(0.0005)
    old_boot = b.boot
    b.close()  # the simulated port drops its queue with it
    produce(1000)
    world.run_for(0.5)  # down for a while: resends to nowhere, with back-off
    assert not all(o.done for o in outs)
    b = lane("house2", "house1")
    b.hooks.add("message", lambda m: second_got.append(m.data["n"]))
    assert world.run_until(lambda: all(o.done for o in outs), 60)
    _check_restart(outs, delivered_by, first_got, second_got, old_boot, b.boot, stream_of=lambda n: n % 2)
    a.close()
    b.close()


def test_simulated_timeouts_while_a_known_yard_is_down_leave_no_gap():
    world = World(seed=5)
    sched = world.scheduler

    def lane(name: str, peer: str) -> LaneStack:
        return LaneStack(world.net.port(f"run/{name}"), name, {peer: f"run/{peer}"}, scheduler=sched, acks=True)

    a = lane("house1", "house2")
    b = lane("house2", "house1")
    first = [a.send({"n": i}, "house2") for i in range(10)]
    assert world.run_until(lambda: all(o.done for o in first), 5)
    b.close()
    waiting = [a.send({"n": 10 + i}, "house2") for i in range(5)]
    doomed = a.send({"doomed": 1}, "house2", timeout=1.0)
    after = [a.send({"n": 15 + i}, "house2") for i in range(5)]
    assert world.run_until(lambda: doomed.done, 5)
    assert doomed.state == "failed" and doomed.reason == "timeout"
    world.run_for(20)  # down a long while: resends back off (200 ms doubling to 8 s), nothing else fails
    assert all(o.state == "queued" for o in waiting + after)
    sent = world.net.counts["sent"]
    assert sent < 30, sent  # no busy loop towards a yard that is gone
    b = lane("house2", "house1")
    got = []
    b.hooks.add("message", got.append)
    assert world.run_until(lambda: all(o.done for o in waiting + after), 5)
    assert [m.data["n"] for m in got] == list(range(10, 20))
    a.close()
    b.close()
