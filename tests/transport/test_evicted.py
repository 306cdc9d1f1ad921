"""A message whose acknowledged pieces the receiver's hold budget dropped fails at its sender.

Was a finding: such a message failed only through its sender's timeout, so
one sent with ``timeout=None`` waited forever, and its stream behind it.
"""

from __future__ import annotations

from flowcast.transport.budget import HoldBudget
from flowcast.transport.reliable import Link, Outgoing
from tests.transport.attacks import seg


class ByHand:
    """Two links, packets carried by hand (each one numbered, as a session would)."""

    def __init__(self, sender: Link, receiver: Link) -> None:
        self.ends = {id(sender): receiver, id(receiver): sender}
        self.counters = {id(sender): 0, id(receiver): 0}

    def carry(self, source: Link, now: float, *, drop: bool = False) -> bool:
        built = source.build()
        if built is None:
            return False
        body, chunks = built
        counter = self.counters[id(source)]
        self.counters[id(source)] = counter + 1
        source.sent(counter, len(body), chunks, now)
        if not drop:
            target = self.ends[id(source)]
            target.received(counter)
            target.handle(body, now)
        return True


def test_a_message_evicted_after_it_was_acknowledged_fails_at_once_and_its_stream_moves_on():
    budget = HoldBudget(300_000)
    done: list[Outgoing] = []
    sender = Link(1400, lambda *a: None, done.append)
    delivered: list[bytes] = []
    receiver = Link(1400, lambda stream, flags, data: delivered.append(bytes(data)), budget=budget)
    hog = Link(60_000, lambda *a: None, budget=budget)
    hand = ByHand(sender, receiver)
    big = sender.submit(Outgoing(b"b" * 200_000, stream=1, timeout=None), 0.0)
    hand.carry(sender, 0.0, drop=True)  # the first packet is lost: the rest waits for it
    while hand.carry(sender, 0.0):
        pass
    hand.carry(receiver, 0.0)  # ACK: every piece but the first acknowledged
    assert receiver.buffered > 150_000 and big.state == "queued"
    # another peer, within its fair share, needs room: the receiver's held pieces go
    for number in range(3):
        hog.handle(seg(0, number, 100, b"h" * 50_000), 0.1)
    assert receiver.counts["evicted"] >= 1 and receiver.buffered < 150_000
    hand.carry(receiver, 0.1)  # the next ACK tells the sender
    assert big.state == "failed" and big.reason == "evicted" and done == [big]
    # its SKIP moves the receiver's stream on: a later message on that stream is delivered
    after = sender.submit(Outgoing(b"next", stream=1, timeout=None), 0.2)
    for _ in range(10):
        hand.carry(sender, 0.2)
        hand.carry(receiver, 0.2)
    assert delivered == [b"next"] and after.state == "delivered"
    assert sender.pending_count == 0 and receiver.evicted_owed is None
