"""The adaptive spin before blocking (flowcast/runtime/spin.py): armed by dense traffic only, bounded,
and never for an idle house (issue 15, item 3: round trips without two wake-ups; item 4: idle stays idle)."""

from __future__ import annotations

import socket

import pytest

from flowcast.runtime import Scheduler, sleep
from flowcast.runtime.spin import SPIN, Spin


class Poll:
    """A poll that answers from a script: each call takes the next answer (its timeout is noted)."""

    def __init__(self, answers: list) -> None:
        self.answers = list(answers)
        self.timeouts: list = []

    def __call__(self, timeout):
        self.timeouts.append(timeout)
        return self.answers.pop(0) if self.answers else []


def test_an_unarmed_wait_blocks_at_once_and_a_quick_answer_arms_it() -> None:
    spin = Spin()
    poll = Poll([["event"]])
    assert spin.wait(poll, 1.0) == ["event"]
    assert poll.timeouts == [1.0]  # no spin first
    assert spin.armed  # the answer came within a spin's time: traffic is dense


def test_an_armed_wait_polls_without_blocking_until_something_comes() -> None:
    spin = Spin()
    spin.armed = True
    poll = Poll([[], [], ["event"]])
    assert spin.wait(poll, 1.0) == ["event"]
    assert poll.timeouts == [0, 0, 0] and spin.hits == 1 and spin.armed


def test_a_spin_that_finds_nothing_disarms_and_blocks_for_what_is_left(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a scripted clock: each poll takes 10 us, the blocking one 5 ms (slower than a spin)."""
    import flowcast.runtime.spin as spin_module

    now = [0.0]
    monkeypatch.setattr(spin_module.time, "perf_counter", lambda: now[0])
    spin = Spin()
    spin.armed = True
    polls: list = []

    def poll(timeout):
        polls.append(timeout)
        if timeout:
            now[0] += 0.005
            return ["late"]
        now[0] += 10e-6
        return []

    assert spin.wait(poll, 1.0) == ["late"]
    spun = [t for t in polls if t == 0]
    assert len(spun) == round(SPIN / 10e-6) and spin.misses == 1  # polled for one spin's time, no longer
    assert polls[-1] == pytest.approx(1.0 - SPIN)  # then blocked for what was left of the timeout
    assert not spin.armed  # the answer took longer than a spin: slow traffic does not spin


def test_a_zero_timeout_and_a_zero_budget_never_spin() -> None:
    spin = Spin(budget=0)
    spin.armed = True
    poll = Poll([[]])
    spin.wait(poll, 1.0)
    assert poll.timeouts == [1.0]
    armed = Spin()
    armed.armed = True
    poll = Poll([[]])
    armed.wait(poll, 0)
    assert poll.timeouts == [0] and armed.misses == 0 and armed.armed
    with pytest.raises(ValueError):
        Spin(budget=1.0)


def test_an_idle_house_never_spins() -> None:
    """A house with a socket to watch and a timer every 10 ms, and no traffic: every wait ends by its
    timer, long after a spin's time, so the spin is never armed and never polls."""
    scheduler = Scheduler()
    left, right = socket.socketpair()
    try:
        left.setblocking(False)
        scheduler.add_reader(left, lambda: left.recv(64))

        def ticks():
            for _ in range(10):
                yield sleep(0.01)
            scheduler.remove_reader(left)

        scheduler.spawn(ticks(), name="ticks")
        scheduler.run()
        assert (scheduler.spin.armed, scheduler.spin.hits, scheduler.spin.misses) == (False, 0, 0)
        assert SPIN < 0.01
    finally:
        left.close()
        right.close()


def test_the_spin_is_off_where_more_houses_than_cores_share_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    import flowcast.runtime.spin as spin_module

    monkeypatch.setattr(spin_module.os, "sched_getaffinity", lambda pid: {0, 1})
    assert spin_module.usable_cores() == 2
    assert spin_module.budget_for(1) == spin_module.budget_for(2) == SPIN
    assert spin_module.budget_for(3) == 0.0  # a spinning house would hold a core another one needs
