"""One hook set per stack: listeners add up, cost nothing when absent, and one that raises is removed."""

from __future__ import annotations

import logging
import os
import tempfile

import pytest

from flowcast.transport.hooks import Hooks
from flowcast.transport.lane import LaneStack
from flowcast.transport.ports import UxdPort
from flowcast.transport.presence import Presence
from flowcast.transport.stack import serve

from .roadkit import World


def test_no_listener_is_none_and_listeners_add_up_in_order():
    hooks = Hooks(("message", "done"), "test")
    assert hooks.message is None and hooks.done is None
    got = []
    first, second = (lambda x: got.append(("first", x))), (lambda x: got.append(("second", x)))
    hooks.add("message", first)
    hooks.add("message", second)
    hooks.message(1)
    assert got == [("first", 1), ("second", 1)] and hooks.done is None
    hooks.remove("message", first)
    hooks.message(2)
    assert got[-1] == ("second", 2) and len(got) == 3
    hooks.remove("message", second)
    assert hooks.message is None  # back to nothing to pay


def test_bad_hook_names_and_listeners_are_errors_at_once():
    hooks = Hooks(("message",))
    with pytest.raises(ValueError, match="no hook 'mesage'"):
        hooks.add("mesage", print)
    with pytest.raises(ValueError, match="not callable"):
        hooks.add("message", 3)
    hooks.add("message", print)
    with pytest.raises(ValueError, match="already installed"):
        hooks.add("message", print)
    with pytest.raises(KeyError):
        hooks.remove("message", repr)
    hooks.discard("message", repr)  # nothing to do, no error
    with pytest.raises(ValueError):
        Hooks(("add",))  # would hide the method


def test_a_listener_that_raises_is_logged_and_removed_and_the_others_still_hear(caplog):
    hooks = Hooks(("done",), "road alpha")
    got = []

    def broken(x):
        raise RuntimeError("listener bug")

    hooks.add("done", got.append)
    hooks.add("done", broken)
    hooks.add("done", lambda x: got.append(-x))
    with caplog.at_level(logging.ERROR, logger="flowcast.hooks"):
        hooks.done(5)
    assert got == [5, -5]
    assert len(hooks.listeners("done")) == 2 and broken not in hooks.listeners("done")
    assert "road alpha" in caplog.text and "listener bug" in caplog.text and "removed" in caplog.text
    hooks.done(6)
    assert got == [5, -5, 6, -6]


def test_the_old_single_listener_slots_say_where_listeners_go_now():
    world = World(seed=1, delay=0.001)
    alpha, _beta = world.pair()
    for slot, hook in (("on_message", "message"), ("on_done", "done"), ("on_presence", "presence")):
        with pytest.raises(AttributeError, match=f"hooks.add\\('{hook}'"):
            setattr(alpha, slot, print)
        with pytest.raises(AttributeError):
            getattr(alpha, slot)


def test_two_parties_hear_a_roads_messages_presence_and_failures():
    world = World(seed=2, delay=0.001)
    alpha, beta = world.pair(alive_interval=0.5, dead_after=1.5)
    one, two, presences, failed = [], [], [], []
    beta.hooks.add("message", one.append)
    beta.hooks.add("message", two.append)
    alpha.hooks.add("presence", lambda name, old, new: presences.append(("a", new)))
    alpha.hooks.add("presence", lambda name, old, new: presences.append(("b", new)))
    alpha.hooks.add("done", lambda msg: failed.append(msg) if msg.state == "failed" else None)
    out = alpha.send({"n": 1}, "beta")
    assert world.run_until(lambda: out.delivered, 5)
    assert [m.data for m in one] == [{"n": 1}] == [m.data for m in two] and beta.receive() is None
    world.net.partition(["alpha"], ["beta"])
    assert world.run_until(lambda: alpha.presence("beta") is Presence.DEAD, 5)
    assert presences == [("a", Presence.DEAD), ("b", Presence.DEAD)]
    doomed = alpha.send({"n": 2}, "beta", timeout=0.5)
    assert world.run_until(lambda: doomed.done, 5)
    assert failed == [doomed]


def test_a_raising_message_listener_does_not_break_the_stack(caplog):
    world = World(seed=3, delay=0.001)
    alpha, beta = world.pair()
    got = []

    def broken(message):
        raise ValueError("bad listener")

    beta.hooks.add("message", broken)
    with caplog.at_level(logging.ERROR, logger="flowcast.hooks"):
        first = alpha.send({"n": 1}, "beta")
        assert world.run_until(lambda: first.delivered, 5)
    assert beta.hooks.message is None and "bad listener" in caplog.text
    # The message its only listener failed on is not lost: it waits in the inbox.
    assert beta.counts["listener_failed"] == 1 and [m.data for m in beta.receive_many()] == [{"n": 1}]
    beta.hooks.add("message", got.append)
    second = alpha.send({"n": 2}, "beta")
    assert world.run_until(lambda: second.delivered and got, 5)
    assert got[0].data == {"n": 2}


def test_a_lone_listener_is_the_hook_itself_and_its_owner_guards_the_call(caplog):
    hooks = Hooks(("done",), "lane w1")
    hooks.add("done", print)
    assert hooks.done is print  # no wrapper: the hot path calls it directly

    def broken(x):
        raise RuntimeError("lone bug")

    guarded = Hooks(("done",), "router", direct=False)
    guarded.add("done", broken)
    with caplog.at_level(logging.ERROR, logger="flowcast.hooks"):
        guarded.done(1)  # guarded here: nothing escapes
    assert guarded.done is None and "lone bug" in caplog.text


def test_a_raising_done_or_presence_listener_is_removed_and_the_road_goes_on(caplog):
    world = World(seed=4, delay=0.001)
    alpha, beta = world.pair(alive_interval=0.5, dead_after=1.5)

    def broken(*args):
        raise RuntimeError("done bug")

    alpha.hooks.add("done", broken)
    alpha.hooks.add("presence", broken)
    with caplog.at_level(logging.ERROR, logger="flowcast.hooks"):
        out = alpha.send({"n": 1}, "beta")
        assert world.run_until(lambda: out.delivered, 5)
        world.net.partition(["alpha"], ["beta"])
        assert world.run_until(lambda: alpha.presence("beta") is Presence.DEAD, 5)
    assert alpha.hooks.done is None and alpha.hooks.presence is None
    assert sorted(r.args[2] for r in caplog.records if r.name == "flowcast.hooks") == ["done", "presence"]
    world.net.heal()
    again = alpha.send({"n": 2}, "beta")
    assert world.run_until(lambda: again.delivered, 10)


def test_a_done_listener_added_or_removed_while_links_live_is_heard_from_the_next_message_on():
    """Links call nothing per finished message while nobody listens (Stack._done_call), so adding
    and removing a ``done`` listener must reach the links that already exist, on roads and lanes."""
    world = World(seed=3, delay=0.001)
    alpha, beta = world.pair()
    quiet = alpha.send_bytes(b"q", "beta")
    assert world.run_until(lambda: quiet.delivered, 5)
    heard: list = []
    alpha.hooks.add("done", heard.append)
    out = alpha.send_bytes(b"a", "beta")
    assert world.run_until(lambda: out.delivered, 5)
    assert heard == [out]
    alpha.hooks.remove("done", heard.append)
    later = alpha.send_bytes(b"b", "beta")
    assert world.run_until(lambda: later.delivered, 5)
    assert heard == [out] and alpha.remote("beta").session.link.completed is None

    with tempfile.TemporaryDirectory() as rundir:
        one = LaneStack(UxdPort(rundir, "one"), "one", {"two": os.path.join(rundir, "two")}, acks=True)
        two = LaneStack(UxdPort(rundir, "two"), "two", {"one": os.path.join(rundir, "one")}, acks=True)
        try:
            first = one.send_bytes(b"x", "two")
            assert serve([one, two], until=lambda: first.done, timeout=5)
            lane_heard: list = []
            one.hooks.add("done", lane_heard.append)
            acked = one.send_bytes(b"y", "two")
            assert serve([one, two], until=lambda: acked.done, timeout=5)
            assert acked.state == "delivered" and lane_heard == [acked]
        finally:
            one.close()
            two.close()
