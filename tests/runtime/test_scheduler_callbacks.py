"""Scheduler callbacks: a failing timer, reader or writer is named; dead timers do not pile up."""

from __future__ import annotations

import random
import socket

import pytest

from flowcast.runtime import CallbackError, Scheduler, VirtualClock, sleep


class Boom:
    """Callbacks with a qualified name worth finding in a report."""

    def __init__(self) -> None:
        self.calls = 0

    def fire(self) -> None:
        self.calls += 1
        raise ValueError("timer went off wrong")

    def on_readable(self) -> None:
        self.calls += 1
        raise OSError("reader broke")

    def on_writable(self) -> None:
        self.calls += 1
        raise KeyError("writer broke")


# -- a failing callback is reported by name --------------------------------


def test_raising_timer_is_reported_naming_it_and_the_run_can_go_on():
    s = Scheduler(VirtualClock())
    boom = Boom()
    later = []
    s.call_at(1.0, boom.fire)
    s.call_at(2.0, later.append, "after")
    with pytest.raises(CallbackError) as info:
        s.run()
    error = info.value
    assert "timer callback Boom.fire failed" in str(error)
    assert "timer went off wrong" in str(error)
    assert isinstance(error.__cause__, ValueError) and error.error is error.__cause__
    assert error.role == "timer" and error.fd is None and error.callback == boom.fire
    assert s.clock.now() == 1.0 and later == []
    # Same policy as a failed micro-thread: the run ends loudly, the scheduler
    # is intact, and the next run does the work that is left.
    s.run()
    assert later == ["after"] and boom.calls == 1
    s.close()


def test_raising_closure_timer_is_named_by_its_qualname():
    s = Scheduler(VirtualClock())

    def expire_held():
        raise RuntimeError("no")

    s.call_later(0.5, expire_held)
    with pytest.raises(CallbackError, match=r"expire_held failed"):
        s.run()
    s.close()


def test_raising_reader_is_reported_naming_it_and_its_fd():
    s = Scheduler(VirtualClock())
    a, b = socket.socketpair()
    try:
        a.setblocking(False)
        boom = Boom()
        s.add_reader(a, boom.on_readable)
        b.send(b"x")
        with pytest.raises(CallbackError) as info:
            s.run()
        error = info.value
        assert f"reader callback Boom.on_readable on fd {a.fileno()} failed" in str(error)
        assert isinstance(error.__cause__, OSError)
        assert error.role == "reader" and error.fd == a.fileno()
        # The reader stays registered: the data is still there, so it is
        # called again (and fails again) -- nothing was dropped quietly.
        assert s.has_reader(a)
        with pytest.raises(CallbackError):
            s.run()
        assert boom.calls == 2
    finally:
        s.close()
        a.close()
        b.close()


def test_raising_writer_is_reported_naming_it_and_its_fd():
    s = Scheduler(VirtualClock())
    a, b = socket.socketpair()
    try:
        boom = Boom()
        s.add_writer(a, boom.on_writable)
        with pytest.raises(CallbackError, match=rf"writer callback Boom.on_writable on fd {a.fileno()} failed"):
            s.run()
    finally:
        s.close()
        a.close()
        b.close()


def test_keyboard_interrupt_from_a_timer_is_not_wrapped():
    s = Scheduler(VirtualClock())

    def interrupted():
        raise KeyboardInterrupt

    s.call_later(1.0, interrupted)
    with pytest.raises(KeyboardInterrupt):
        s.run()
    s.close()


# -- cancelled timers are compacted -----------------------------------------


def test_cancelling_10000_of_10011_timers_compacts_the_heap_and_keeps_order():
    s = Scheduler(VirtualClock())
    fired = []
    # Live timers come first, so no cancelled one ever reaches the head of
    # the heap: only compaction can remove them.  Ties at 5.0 check that
    # timers due together still fire in the order they were armed.
    live_at = [1.0, 5.0, 5.0, 5.0, 2.0, 9.0, 5.0, 3.0, 7.0, 7.0, 8.0]
    for i, when in enumerate(live_at):
        s.call_at(when, fired.append, i)
    doomed = [s.call_at(100.0 + i, fired.append, "cancelled") for i in range(10_000)]
    for timer in doomed:
        timer.cancel()
    # At most COMPACT_MIN dead ones wait for the next sweep (10,011 before).
    assert len(s._timers) <= len(live_at) + Scheduler.COMPACT_MIN
    assert sum(not entry[2].cancelled for entry in s._timers) == len(live_at)
    s.run()
    assert fired == sorted(range(len(live_at)), key=lambda i: (live_at[i], i))
    assert s.clock.now() == 9.0


def test_arming_and_cancelling_a_deadline_per_step_keeps_the_heap_bounded():
    s = Scheduler(VirtualClock())
    sizes = []

    def per_message_deadline():
        keep = s.call_later(1_000.0, lambda: None)  # one live timer far off
        for _ in range(10_000):
            s.call_later(60.0, lambda: None).cancel()
            sizes.append(len(s._timers))
            yield
        keep.cancel()

    s.spawn(per_message_deadline())
    s.run()
    # Without compaction the heap ends 10,000 deep; with it, the dead never
    # outnumber the threshold or the live.
    assert max(sizes) <= 2 + Scheduler.COMPACT_MIN
    assert s._timers == [] and s._cancelled_timers == 0


def test_cancelled_count_matches_the_heap_under_random_arm_cancel_and_run():
    rng = random.Random(11)
    s = Scheduler(VirtualClock())
    fired = []
    armed = []  # (when, order, timer)
    order = 0
    for _ in range(40):
        for _ in range(rng.randrange(0, 300)):
            when = s.clock.now() + rng.choice([0.0, 0.5, 1.0, rng.uniform(0, 20)])
            armed.append((when, order, s.call_at(when, fired.append, order)))
            order += 1
        for _, _, timer in rng.sample(armed, k=min(len(armed), rng.randrange(0, 400))):
            timer.cancel()  # some twice, some after they fired: neither may count
        s.run(until=s.clock.now() + rng.uniform(0, 3))
        in_heap = sum(entry[2].cancelled for entry in s._timers)
        assert s._cancelled_timers == in_heap
    s.run()
    expected = [o for when, o, timer in sorted(armed, key=lambda a: (a[0], a[1])) if o in set(fired)]
    assert fired == expected  # timers fire in (when, armed order), compaction or not
    assert s._cancelled_timers == 0 and s._timers == []


def test_a_sleeping_thread_cancelled_in_bulk_still_leaves_live_sleepers_on_time():
    s = Scheduler(VirtualClock())
    woke = []

    def sleeper(name, delay):
        yield sleep(delay)
        woke.append((s.clock.now(), name))

    doomed = [s.spawn(sleeper(f"d{i}", 50.0)) for i in range(500)]
    s.spawn(sleeper("early", 1.0))
    s.spawn(sleeper("late", 2.0))
    s.run(until=0.1)  # all have parked on their timers
    for thread in doomed:
        s.cancel(thread)
    assert len(s._timers) <= 2 + Scheduler.COMPACT_MIN  # 502 before
    s.run()
    assert woke == [(1.0, "early"), (2.0, "late")]
