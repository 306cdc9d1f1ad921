"""Scheduler behaviour: ordering, timers, virtual time, I/O wake-ups, errors."""

from __future__ import annotations

import socket
import threading

import pytest

from flowcast.runtime import (
    Event,
    MicroThreadError,
    RealClock,
    Scheduler,
    VirtualClock,
    readable,
    sleep,
    sleep_until,
)


def test_round_robin_order_is_spawn_order():
    s = Scheduler(VirtualClock())
    log = []

    def worker(name):
        for i in range(3):
            log.append((name, i))
            yield

    for name in "abc":
        s.spawn(worker(name), name=name)
    s.run()
    assert log == [(n, i) for i in range(3) for n in "abc"]


def test_virtual_clock_jumps_to_timers_and_join_returns_result():
    s = Scheduler(VirtualClock())
    seen = []

    def child():
        for _ in range(3):
            yield sleep(1.5)
            seen.append(s.clock.now())
        return "ok"

    def parent():
        result = yield s.spawn(child()).join()
        seen.append(result)

    s.spawn(parent())
    s.run()
    assert seen == [1.5, 3.0, 4.5, "ok"]
    assert s.clock.now() == 4.5


def test_run_until_stops_at_that_time_and_resumes():
    s = Scheduler(VirtualClock())
    ticks = []

    def ticker():
        while True:
            ticks.append(s.clock.now())
            yield sleep_until(s.clock.now() + 1.0)

    s.spawn(ticker())
    s.run(until=3.0)
    assert ticks == [0.0, 1.0, 2.0, 3.0]
    s.run(until=5.0)
    assert ticks[-1] == 5.0
    s.close()


def test_same_seedless_run_gives_same_trace():
    def trace():
        s = Scheduler(VirtualClock())
        out = []

        def w(name, period):
            for _ in range(5):
                out.append((s.clock.now(), name))
                yield sleep(period)

        s.spawn(w("x", 0.3))
        s.spawn(w("y", 0.2))
        s.run()
        return out

    assert trace() == trace()


def test_error_in_thread_raises_from_run_with_cause():
    s = Scheduler(VirtualClock())

    def bad():
        yield
        raise ValueError("boom")

    s.spawn(bad(), name="bad")
    with pytest.raises(MicroThreadError) as info:
        s.run()
    assert isinstance(info.value.__cause__, ValueError)
    assert "bad" in str(info.value)


def test_error_handler_keeps_run_going():
    s = Scheduler(VirtualClock())
    errors = []
    done = []

    def bad():
        raise KeyError("x")
        yield

    def good():
        yield sleep(1)
        done.append(True)

    s.spawn(bad(), on_error=lambda t, e: errors.append(type(e)))
    s.spawn(good())
    s.run()
    assert errors == [KeyError] and done == [True]


def test_yielding_a_non_directive_is_a_clear_error():
    s = Scheduler(VirtualClock())

    def wrong():
        yield 42

    s.spawn(wrong(), name="wrong")
    with pytest.raises(MicroThreadError, match="yielded 42"):
        s.run()


def test_event_wakes_waiters():
    s = Scheduler(VirtualClock())
    ev = Event()
    got = []

    def waiter():
        yield ev.wait()
        got.append(s.clock.now())

    def setter():
        yield sleep(2)
        ev.set()

    s.spawn(waiter())
    s.spawn(setter())
    s.run()
    assert got == [2.0]


def test_cancel_runs_finally():
    s = Scheduler(VirtualClock())
    cleaned = []

    def body():
        try:
            yield sleep(100)
        finally:
            cleaned.append(True)

    t = s.spawn(body())
    s.run(until=1)
    s.cancel(t)
    assert cleaned == [True] and t.done


def test_datagram_wakes_blocked_scheduler_without_timer():
    """A thread blocked on a socket wakes when a datagram arrives, not on a poll."""
    s = Scheduler(RealClock())
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    a.bind(("127.0.0.1", 0))
    a.setblocking(False)
    got = []

    def reader():
        yield readable(a)
        got.append(a.recv(100))

    s.spawn(reader())
    out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    # From another thread, so the datagram arrives while the scheduler is blocked.
    sender = threading.Timer(0.05, lambda: out.sendto(b"hi", a.getsockname()))
    sender.start()
    s.run(until=10.0)  # returns as soon as nothing is left, well before 10 s
    sender.join()
    a.close()
    out.close()
    s.close()
    assert got == [b"hi"]
    assert s.clock.now() < 5.0
    assert s.waits <= 3, f"{s.waits} loop turns: the wait polled instead of blocking"


def test_stop_from_another_thread_interrupts_blocking_wait():
    s = Scheduler(RealClock())
    s.enable_wakeup()

    def forever():
        yield sleep(3600)

    s.spawn(forever())
    stopper = threading.Timer(0.05, s.stop)
    stopper.start()
    s.run()
    stopper.join()
    assert s.clock.now() < 60
    s.close()


def test_idle_scheduler_blocks_instead_of_polling():
    """Waiting 50 ms for one timer takes a handful of loop turns, not a poll per period."""
    s = Scheduler(RealClock())
    woke = []

    def sleeper():
        yield sleep(0.05)
        woke.append(s.clock.now())

    s.spawn(sleeper())
    s.run()
    assert woke and woke[0] >= 0.05
    assert s.waits <= 4, f"scheduler looped {s.waits} times while idle"


def test_wakeup_alone_does_not_keep_run_alive():
    s = Scheduler(RealClock())
    s.enable_wakeup()

    def brief():
        yield sleep(0.01)

    s.spawn(brief())
    s.run()  # must return once the thread ends, though the waker is registered
    assert s.threads == frozenset()
    s.close()


def test_reader_and_writer_on_one_socket():
    s = Scheduler(RealClock())
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.setblocking(False)
    b.setblocking(False)
    seen = []

    def on_write():
        seen.append("w")
        s.remove_writer(a)  # level-triggered: stop once the backlog is out
        a.send(b"x")

    def on_read():
        seen.append(b.recv(10))
        s.remove_reader(b)

    s.add_writer(a, on_write)
    s.add_reader(b, on_read)
    s.add_reader(a, lambda: None)  # a reader beside the writer on the same socket
    s.remove_reader(a)
    s.run(until=5.0)
    a.close()
    b.close()
    assert seen == ["w", b"x"]
    assert s.clock.now() < 5.0  # returned once nothing was watched any more


def test_stop_from_inside_a_thread_returns_without_blocking():
    s = Scheduler(RealClock())  # no enable_wakeup(): nothing could interrupt a blocking wait

    def stopper():
        yield
        s.stop()

    def sleeper():
        yield sleep(3600)

    s.spawn(sleeper())
    s.spawn(stopper())
    s.run()
    assert s.clock.now() < 60
    s.close()


def test_stop_before_run_is_not_lost():
    s = Scheduler(RealClock())

    def sleeper():
        yield sleep(3600)

    s.spawn(sleeper())
    s.stop()  # e.g. SIGTERM after handlers are installed, before run()
    s.run()
    assert s.clock.now() < 60
    s.close()


def test_cancelled_thread_leaves_no_timer_reader_or_event_wait_behind():
    s = Scheduler(VirtualClock())
    ev = Event()
    a, b = socket.socketpair()

    def sleeper():
        yield sleep(1000)

    def reader():
        yield readable(a)

    def waiter():
        yield ev.wait()

    threads = [s.spawn(sleeper()), s.spawn(reader()), s.spawn(waiter())]
    s.run(until=1.0)
    for t in threads:
        s.cancel(t)
    s.run()  # nothing is left: returns at once, the clock does not jump to 1000
    assert s.clock.now() == 1.0
    assert ev._waiters == [] and s._readers == 0
    a.close()
    b.close()
    s.close()


def test_readable_refuses_to_replace_a_persistent_reader():
    s = Scheduler(RealClock())
    a, b = socket.socketpair()
    s.add_reader(a, lambda: None)

    def waiter():
        yield readable(a)

    s.spawn(waiter(), name="waiter")
    with pytest.raises(MicroThreadError, match="already has a reader"):
        s.run(until=1.0)
    assert s.has_reader(a)  # the persistent reader is still there
    s.remove_reader(a)
    a.close()
    b.close()
    s.close()
