"""Framer semantics at the model level (no parser): the Ioflo rules that traces show."""

from __future__ import annotations

import pytest

from flowcast.behaving import Registry, behaviour
from flowcast.flow.builder import build_house
from flowcast.flow.errors import FlowErrors
from flowcast.flow.skedder import Skedder, Stamp
from flowcast.flow.spec import Act, Aux, FrameSpec, FramerSpec, HouseSpec, Init, Need, Ref
from flowcast.runtime import Scheduler, VirtualClock


def run(house: HouseSpec, until: float = 5.0, period: float = 0.125, registry: Registry | None = None):
    trace, printed = [], []
    stamp = Stamp()
    built = build_house(house, stamp=stamp, on_transition=trace.append, out=printed.append, registry=registry or Registry())
    skedder = Skedder(built.taskables, period, stamp)
    scheduler = Scheduler(VirtualClock())
    scheduler.spawn(skedder.run(scheduler, until))
    scheduler.run()
    return [(t.time, t.framer, t.source, t.target) for t in trace], printed, built


def go(far, *needs, context="precur"):
    return Act("go", context, {"far": far, "needs": list(needs)})


def test_counter_then_timeout_then_stop():
    house = HouseSpec("h", inits=[Init(Ref(".n"), {"value": 0})], framers=[
        FramerSpec("main", frames=[
            FrameSpec("count", acts=[Act("inc", "recur", {"dst": Ref(".n"), "data": {"value": 1}}),
                                     go("next", Need("compare", state=Ref(".n"), op=">=", goal_value=3))]),
            FrameSpec("wait", acts=[Act("print", "enter", {"message": "waiting"}),
                                    go("next", Need("elapsed", op=">=", goal_value=0.5))]),
            FrameSpec("end", acts=[Act("bid", "enter", {"control": "stop", "taskers": ["me"]})]),
        ])])
    trace, printed, built = run(house)
    assert trace == [(0.0, "main", "-", "count"), (0.375, "main", "count", "wait"), (0.875, "main", "wait", "end")]
    assert printed == ["waiting"]
    assert built.store.share("n").value == 3


def test_outer_frame_transition_wins_over_inner():
    # child's own go would fire every tick; the outer's fires first once .flag is set.
    house = HouseSpec("h", inits=[Init(Ref(".flag"), {"value": False})], framers=[
        FramerSpec("f", first="a", frames=[
            FrameSpec("outer", acts=[go("done", Need("boolean", state=Ref(".flag")))]),
            FrameSpec("a", over="outer", acts=[Act("put", "enter", {"data": {"value": True}, "dst": Ref(".flag")}),
                                                 go("b")]),
            FrameSpec("b", over="outer", acts=[go("a")]),
            FrameSpec("done", acts=[Act("bid", "enter", {"control": "stop", "taskers": ["me"]})]),
        ])])
    trace, _, _ = run(house)
    assert trace == [(0.0, "f", "-", "a"), (0.125, "f", "a", "done")]


def test_go_me_reenters_and_resets_recurred():
    house = HouseSpec("h", inits=[Init(Ref(".k"), {"value": 0})], framers=[
        FramerSpec("f", frames=[
            FrameSpec("loop", acts=[Act("inc", "enter", {"dst": Ref(".k"), "data": {"value": 1}}),
                                    go("me", Need("recurred", op=">=", goal_value=2)),
                                    ]),
        ])])
    trace, _, built = run(house, until=1.0)
    assert trace[:3] == [(0.0, "f", "-", "loop"), (0.25, "f", "loop", "loop"), (0.5, "f", "loop", "loop")]
    assert built.store.share("k").value == len(trace)


def test_aux_runs_inside_frame_and_done_is_seen():
    house = HouseSpec("h", framers=[
        FramerSpec("main", frames=[
            FrameSpec("work", auxes=[Aux("helper")], acts=[go("next", Need("done", aux="any"))]),
            FrameSpec("end", acts=[Act("bid", "enter", {"control": "stop", "taskers": ["me"]})]),
        ]),
        FramerSpec("helper", schedule="aux", frames=[
            FrameSpec("one", acts=[go("next")]),
            FrameSpec("two", acts=[Act("done", "enter", {"taskers": ["me"]})]),
        ]),
    ])
    trace, _, _ = run(house)
    assert trace == [
        (0.0, "main", "-", "work"),
        (0.0, "helper", "-", "one"),
        (0.125, "helper", "one", "two"),
        # auxes segue before their frame's transitions: done is seen the same tick
        (0.125, "main", "work", "end"),
    ]


def test_inactive_framer_started_by_bid_later_in_order_starts_same_tick():
    house = HouseSpec("h", framers=[
        FramerSpec("boss", frames=[FrameSpec("kick", acts=[Act("bid", "enter", {"control": "start", "taskers": ["worker"]})])]),
        FramerSpec("worker", schedule="inactive", frames=[FrameSpec("w1", acts=[go("next")]), FrameSpec("w2")]),
    ])
    trace, _, _ = run(house, until=0.5)
    # worker comes after boss in the round-robin, so it sees the bid in tick 0
    assert trace[:3] == [(0.0, "boss", "-", "kick"), (0.0, "worker", "-", "w1"), (0.125, "worker", "w1", "w2")]


def test_generator_behaviour_lives_per_frame_entry():
    @behaviour("ramp")
    def ramp(io, step: int = 1):
        value = 0
        try:
            while True:
                value += step
                io.output.value = value
                yield
        finally:
            io.output.update(closed=True)

    registry = Registry()
    registry.add(ramp)
    house = HouseSpec("h", framers=[FramerSpec("f", frames=[
        FrameSpec("a", acts=[Act("do", "recur", {"behaviour": "ramp", "with": {"step": 2}, "to": [Ref(".out")]}),
                             go("next", Need("recurred", op=">=", goal_value=2))]),
        FrameSpec("b", acts=[Act("bid", "enter", {"control": "stop", "taskers": ["me"]})]),
    ])])
    _, _, built = run(house, registry=registry)
    out = built.store.share("out")
    assert out["value"] == 4 and out["closed"] is True


def test_build_errors_are_collected_located_and_suggest():
    from flowcast.flow.spec import Where

    w = Where("x.flo", 3, 5, "    go nxt")
    house = HouseSpec("h", framers=[FramerSpec("f", frames=[
        FrameSpec("start", acts=[Act("go", "precur", {"far": "strat", "needs": []}, where=w),
                                 Act("do", "recur", {"behaviour": "cuont"}, where=w)]),
    ])])
    registry = Registry()
    registry.load_entry_points()
    with pytest.raises(FlowErrors) as info:
        run(house, registry=registry)
    text = str(info.value)
    assert "x.flo:3:5" in text and "did you mean 'start'?" in text and "did you mean 'count'?" in text
    assert "^" in text


def test_framer_state_shares_are_kept_only_when_the_flow_names_them():
    def house(extra_acts):
        return HouseSpec("h", framers=[FramerSpec("f", frames=[
            FrameSpec("a", acts=[*extra_acts, go("next", Need("recurred", op=">=", goal_value=2))]),
            FrameSpec("b", acts=[Act("bid", "enter", {"control": "stop", "taskers": ["me"]})]),
        ])])

    _, _, quiet = run(house([]))
    assert "framer.f.state.recurred" not in quiet.store  # nobody reads it: not updated every tick
    reader = Act("copy", "recur", {"src": Ref("framer.me.state.recurred"), "dst": Ref(".seen")})
    _, _, watched = run(house([reader]))
    state = watched.store.share("framer.f.state.recurred")
    assert (state.value, state.stamp) == (0, 0.25)  # reset by the entry into b at 0.25
    assert watched.store.share("seen").value == 1  # copied in the tick before the transition
