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
