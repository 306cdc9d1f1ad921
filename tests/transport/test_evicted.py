"""A message whose acknowledged pieces the receiver's hold budget dropped fails at its sender.

Was a finding: such a message failed only through its sender's timeout, so
one sent with ``timeout=None`` waited forever, and its stream behind it.
"""

from __future__ import annotations

import random

from flowcast.transport.budget import HoldBudget
from flowcast.transport.reliable import Link, Outgoing
from tests.transport.attacks import seg
from tests.transport.roadkit import World


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
    budget = HoldBudget(400_000)
    done: list[Outgoing] = []
    sender = Link(1400, lambda *a: None, done.append)
    delivered: list[bytes] = []
    receiver = Link(1400, lambda stream, flags, data: delivered.append(bytes(data)), budget=budget)
    # two other peers (floors are per session, and one floor is always kept free: budget.py)
    hogs = [Link(60_000, lambda *a: None, budget=budget) for _ in range(2)]
    hand = ByHand(sender, receiver)
    big = sender.submit(Outgoing(b"b" * 200_000, stream=1, timeout=None), 0.0)
    hand.carry(sender, 0.0, drop=True)  # the first packet is lost: the rest waits for it
    while hand.carry(sender, 0.0):
        pass
    hand.carry(receiver, 0.0)  # ACK: every piece but the first acknowledged
    assert receiver.buffered > 150_000 and big.state == "queued"
    # two other peers, within their floors, need room: the receiver's held pieces go
    for hog in hogs:
        for number in range(2):
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


def test_pieces_the_hold_budget_expires_are_acknowledged_ones_their_sender_must_hear_of():
    """A message half received when the path goes dark for longer than ``incomplete_after``:
    the expiry drops acknowledged pieces, never sent again.  Found by an outside review (with
    later messages filling a small budget, before the window kept to the budget's share): with
    no EVICTED notice from budget.expire, a message sent with timeout=None was neither
    delivered nor failed, for ever."""
    world = World(seed=7, delay=0.001)
    alpha, beta = world.pair(datagram_size=1232, incomplete_after=2.0)
    link = beta.remote("alpha").session.link
    original = world.net._send
    passed = [0]
    dark = [False]

    def path(data, src, dst):
        if src == "alpha" and dst == "beta":
            passed[0] += 1
            if dark[0] or passed[0] > 200:  # dark one way after 200 datagrams: beta's ACKs still go
                dark[0] = True
                return None
        return original(data, src, dst)

    world.net._send = path
    out = alpha.send_bytes(random.Random(7).randbytes(600_000), "beta", timeout=None)
    assert world.run_until(lambda: dark[0], 5)
    assert link.buffered > 100_000  # acknowledged pieces held, the rest never coming
    world.run_for(4.0)
    world.net._send = original
    after = alpha.send_bytes(b"after", "beta", timeout=None)
    assert world.run_until(lambda: out.done and after.done, 20)
    assert link.counts.get("expired", 0) == 1  # what this is about
    assert (out.state, out.reason) == ("failed", "evicted")
    assert after.state == "delivered" and [m.data for m in beta.receive_many()] == [b"after"]
    assert link.buffered == 0


def test_a_window_kept_to_the_budgets_share_delivers_what_a_larger_one_got_evicted():
    """One honest peer, 1% loss, 1.25 MB on one stream against a 1 MiB hold budget (an outside
    review's case): with the 8 MiB window advertised, the later messages' pieces filled the
    budget, the first message's resends were refused, and every message expired and failed
    'evicted'.  The advertised window now stays within half the link's share of the budget."""
    world = World(seed=7, delay=(0.0005, 0.002))
    alpha, beta = world.pair(datagram_size=1232, hold_budget=1 << 20, incomplete_after=2.0)
    world.net.link("alpha", "beta", both=False, loss=0.01)
    rng = random.Random(7)
    payloads = [rng.randbytes(n) for n in (600_000, 300_000, 300_000, 50_000)]
    outs = [alpha.send_bytes(p, "beta", timeout=None) for p in payloads]
    got = []
    assert world.run_until(lambda: (got.extend(beta.receive_many()) or True) and all(o.done for o in outs), 60)
    assert [o.state for o in outs] == ["delivered"] * 4
    assert [m.data for m in got] == payloads
    assert beta.remote("alpha").session.link.counts.get("refused", 0) == 0
