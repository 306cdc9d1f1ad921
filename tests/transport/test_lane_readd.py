"""A yard added again keeps what its lane had heard: no replay window opens."""

from __future__ import annotations

from tests.transport.test_lane_auth import _impostor, _inject, _stack

from flowcast.transport.lanekeys import new_secret
from flowcast.transport.stack import serve


def test_datagrams_heard_before_a_yard_is_added_again_are_still_replays(tmp_path):
    """Was a finding: add_yard on a known yard reset the newest sequence heard to the
    stack's start, so every datagram recorded since could be replayed once more."""
    run = tmp_path / "run"
    secret = new_secret()
    a, b = _stack(run, secret, "manor"), _stack(run, secret, "w1")
    sent: list[bytes] = []
    send = a.port.send
    a.port.send = lambda data, address: sent.append(data) or send(data, address)  # type: ignore[method-assign]
    relay = None
    try:
        for i in range(10):
            a.send({"n": i}, "w1")
            a.flush()
        assert serve([a, b], until=lambda: len(b.inbox) == 10, timeout=5)
        b.receive_many()
        assert sent
        b.add_yard("manor", a.address)  # e.g. the manor announced again at the same path
        relay = _impostor(a.address, unlink=True)
        _inject(relay, sent, b)
        assert serve([b], until=lambda: b.counts["lane_replayed"] == len(sent), timeout=5), dict(b.counts)
        assert b.receive() is None and not b.inbox
    finally:
        if relay is not None:
            relay.close()
        a.close()
        b.close()
