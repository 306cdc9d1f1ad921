"""Class behaviours' optional lifecycle: enter/exit/abort wired to their frame.

Order is what matters: a lease taken in ``enter`` must be released in
``exit`` exactly once however the frame is left -- a transition, an aux
finishing, ``bid stop`` from another framer, or a raise.
"""

from __future__ import annotations

import pytest

from flowcast.behaving import Registry
from flowcast.flow.builder import BehaviourFailure, build_house
from flowcast.flow.skedder import Skedder, Stamp
from flowcast.flow.spec import Act, Aux, FrameSpec, FramerSpec, HouseSpec, Need
from flowcast.runtime import Scheduler, VirtualClock
from flowcast.runtime.scheduler import MicroThreadError


def recorder(log: list, fail_on: str = "", fail_at: int = 0) -> type:
    class Rec:
        def __init__(self, io, tag: str = "") -> None:
            self.tag = tag
            self.calls = 0

        def enter(self) -> None:
            log.append((self.tag, "enter"))
            if fail_on == "enter":
                raise ValueError("no lease")

        def __call__(self) -> None:
            self.calls += 1
            log.append((self.tag, "recur"))
            if fail_on == "recur" and self.calls == fail_at:
                raise ValueError("boom")

        def exit(self) -> None:
            log.append((self.tag, "exit"))

        def abort(self, exc: Exception) -> None:
            log.append((self.tag, "abort", repr(exc)))

    return Rec


def do(tag: str, context: str = "recur") -> Act:
    return Act("do", context, {"behaviour": "rec", "with": {"tag": tag}})


def stop(who: str = "me") -> Act:
    return Act("bid", "enter", {"control": "stop", "taskers": [who]})


def go(far: str, *needs: Need) -> Act:
    return Act("go", "precur", {"far": far, "needs": list(needs)})


def run(house: HouseSpec, cls: type, until: float = 2.0):
    registry = Registry()
    registry.add(cls, "rec")
    stamp = Stamp()
    built = build_house(house, stamp=stamp, on_transition=lambda t: None, out=lambda m: None, registry=registry)
    skedder = Skedder(built.taskables, 0.125, stamp)
    scheduler = Scheduler(VirtualClock())
    scheduler.spawn(skedder.run(scheduler, until))
    scheduler.run()
    return built


def test_enter_recur_exit_across_transitions_and_reentry():
    log: list = []
    house = HouseSpec("h", framers=[FramerSpec("main", frames=[
        FrameSpec("a", acts=[do("a"), go("b", Need("recurred", op=">=", goal_value=1))]),
        FrameSpec("b", acts=[do("b"), go("c", Need("recurred", op=">=", goal_value=1))]),
        FrameSpec("c", acts=[stop()]),
    ])])
    run(house, recorder(log))
    assert log == [
        ("a", "enter"), ("a", "recur"), ("a", "exit"),
        ("b", "enter"), ("b", "recur"), ("b", "exit"),
    ]


def test_exit_runs_after_the_frames_own_exit_acts_and_enter_before_enter_acts_that_follow():
    log: list = []
    house = HouseSpec("h", framers=[FramerSpec("main", frames=[
        FrameSpec("a", acts=[do("act", "exit"), do("first", "enter"), go("end")]),
        FrameSpec("end", acts=[stop()]),
    ])])
    run(house, recorder(log))
    assert log == [
        ("act", "enter"), ("first", "enter"), ("first", "recur"),
        ("act", "recur"), ("act", "exit"), ("first", "exit"),
    ]


def test_aux_frame_behaviour_exits_when_the_aux_finishes():
    log: list = []
    house = HouseSpec("h", framers=[
        FramerSpec("main", frames=[
            FrameSpec("work", auxes=[Aux("helper")], acts=[go("end", Need("done", aux="any"))]),
            FrameSpec("end", acts=[stop()]),
        ]),
        FramerSpec("helper", schedule="aux", frames=[
            FrameSpec("one", acts=[do("h"), go("two", Need("recurred", op=">=", goal_value=2))]),
            FrameSpec("two", acts=[Act("done", "enter", {"taskers": ["me"]})]),
        ]),
    ])
    run(house, recorder(log))
    assert log == [("h", "enter"), ("h", "recur"), ("h", "recur"), ("h", "exit")]


def test_bid_stop_from_another_framer_exits_once():
    log: list = []
    house = HouseSpec("h", framers=[
        FramerSpec("main", frames=[FrameSpec("a", acts=[do("m")])]),
        FramerSpec("boss", frames=[
            FrameSpec("wait", acts=[go("kill", Need("elapsed", op=">=", goal_value=0.25))]),
            FrameSpec("kill", acts=[stop("main")]),
        ]),
    ])
    run(house, recorder(log), until=1.0)
    assert log[0] == ("m", "enter")
    assert log[-1] == ("m", "exit")
    assert log.count(("m", "exit")) == 1
    assert set(log[1:-1]) == {("m", "recur")}
    assert len(log) < 10  # stopped early, not at the end of the run


def test_raising_recur_aborts_then_exits_when_the_framer_is_aborted():
    log: list = []
    house = HouseSpec("h", framers=[FramerSpec("main", frames=[FrameSpec("a", acts=[do("x")])])])
    with pytest.raises(MicroThreadError, match="boom") as raised:
        run(house, recorder(log, fail_on="recur", fail_at=2))
    assert isinstance(raised.value.error, BehaviourFailure)  # the policy is unchanged
    assert log == [
        ("x", "enter"), ("x", "recur"), ("x", "recur"),
        ("x", "abort", "ValueError('boom')"), ("x", "exit"),
    ]


def test_raising_first_recur_still_exits():
    # The first recur runs inside the framer's start: it must count as entered.
    log: list = []
    house = HouseSpec("h", framers=[FramerSpec("main", frames=[FrameSpec("a", acts=[do("x")])])])
    with pytest.raises(MicroThreadError, match="boom") as raised:
        run(house, recorder(log, fail_on="recur", fail_at=1))
    assert log == [("x", "enter"), ("x", "recur"), ("x", "abort", "ValueError('boom')"), ("x", "exit")]


def test_raising_enter_aborts_and_exits_at_once():
    log: list = []
    house = HouseSpec("h", framers=[FramerSpec("main", frames=[FrameSpec("a", acts=[do("x")])])])
    with pytest.raises(MicroThreadError, match="no lease") as raised:
        run(house, recorder(log, fail_on="enter"))
    assert log == [("x", "enter"), ("x", "abort", "ValueError('no lease')"), ("x", "exit")]


def test_class_without_hooks_adds_no_acts():
    class Plain:
        def __init__(self, io) -> None:
            pass

        def __call__(self) -> None:
            pass

    registry = Registry()
    registry.add(Plain, "rec")
    built = build_house(
        HouseSpec("h", framers=[FramerSpec("main", frames=[FrameSpec("a", acts=[Act("do", "recur", {"behaviour": "rec"})])])]),
        stamp=Stamp(), on_transition=lambda t: None, out=lambda m: None, registry=registry,
    )
    frame = built.taskables[0].frames["a"]
    assert (frame.enacts, frame.exacts, len(frame.reacts)) == ([], [], 1)


def test_go_me_reenters_the_same_instance_and_the_end_of_the_run_exits():
    log: list = []
    house = HouseSpec("h", framers=[FramerSpec("main", frames=[
        FrameSpec("loop", acts=[do("l"), Act("go", "precur", {"far": "me", "needs": [
            Need("recurred", op=">=", goal_value=1)]})]),
    ])])
    run(house, recorder(log), until=0.5)
    cycle = [("l", "enter"), ("l", "recur"), ("l", "exit")]
    assert len(log) >= 6 and len(log) % 3 == 0
    assert log == cycle * (len(log) // 3)  # the last exit is the skedder's abort at the end
