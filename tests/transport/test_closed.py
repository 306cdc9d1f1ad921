"""A send on a closed stack raises ClosedError at once (it used to return a message that never completed)."""

from __future__ import annotations

import pytest

import flowcast
from flowcast.transport.lane import LaneStack
from tests.transport.roadkit import World


def test_road_send_after_close_raises_closed_error():
    world = World(seed=3)
    alpha, beta = world.pair()
    before = alpha.send({"n": 0}, "beta")
    alpha.close()
    assert before.state == "failed" and before.reason == "stack closed"  # the backlog at close fails, as before
    with pytest.raises(flowcast.ClosedError, match="closed"):
        alpha.send({"n": 1}, "beta")
    with pytest.raises(flowcast.ClosedError):
        alpha.send_bytes(b"raw", "beta", reliable=False)
    with pytest.raises(flowcast.Error):  # a stranger too: closed is said before unknown
        alpha.send({"n": 2}, "nobody")
    beta.close()


@pytest.mark.parametrize("acks", [False, True])
def test_lane_send_after_close_raises_closed_error(acks):
    world = World(seed=4)
    a = LaneStack(world.net.port("yard/a"), "a", {"b": "yard/b"}, scheduler=world.scheduler, acks=acks)
    b = LaneStack(world.net.port("yard/b"), "b", {"a": "yard/a"}, scheduler=world.scheduler, acks=acks)
    sent = a.send({"n": 0}, "b")
    assert world.run_until(lambda: b.receive() is not None, 5) and sent.state in ("sent", "delivered")
    a.close()
    with pytest.raises(flowcast.ClosedError):
        a.send({"n": 1}, "b")
    with pytest.raises(flowcast.ClosedError):
        a.send_bytes(b"raw", "b")
    b.close()


def test_road_close_reports_every_failure_and_a_reply_to_one_cannot_queue():
    """What waited at close reaches on_done like every other failure, and the
    stack is already closed then: an answer sent from on_done (as the router
    answers a failure with an error report) raises instead of queueing for ever."""
    world = World(seed=5)
    alpha, beta = world.pair()
    waiting = [alpha.send({"n": n}, "beta") for n in range(3)]
    heard, answers = [], []

    def on_done(msg):
        heard.append(msg)
        try:
            alpha.send({"error": msg.reason}, "beta")
        except flowcast.ClosedError as error:
            answers.append(error)

    alpha.hooks.add("done", on_done)
    alpha.close()
    assert [m.state for m in waiting] == ["failed"] * 3
    assert set(map(id, heard)) >= set(map(id, waiting)) and len(answers) == len(heard)
    assert alpha.pending() == 0
    beta.close()
