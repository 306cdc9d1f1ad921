"""Buffer caps: over a cap a message is deferred, not lost, and memory stays bounded."""

from __future__ import annotations

from flowcast.causal.message import make
from tests.causal.kit import TOPIC, Causal


def test_a_flood_waiting_on_one_dep_is_bounded_then_delivered_in_full(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "beta"), follow=False, config={"max_per_publisher": 5, "max_buffered": 8})
    beta = world.services["beta"]
    sub = beta.subscribe(TOPIC, "inbox")
    key = world.keys["alpha"]
    root = make(key, TOPIC, b"root")
    chain = [root]
    for i in range(40):
        chain.append(make(key, TOPIC, b"m%d" % i, deps=[chain[-1].id]))
    for msg in chain[1:]:
        assert beta.relay.accept(msg.wire, "") == "stored"  # from nowhere: nobody to fetch from
    other = make(world.keys["beta"], TOPIC, b"another publisher is not held up")
    assert beta.relay.accept(other.wire, "") == "stored"
    most = 0
    assert world.run_until(lambda: beta.relay.counts["stored"] == 41, 10)
    most = max(most, len(sub.mailbox.buffered))
    assert most <= 5 and sub.mailbox.per_publisher[bytes(key.verify_key)] <= 5
    assert sub.mailbox.deferred  # remembered as a seq, not as messages
    assert [i["content"] for i in world.queue("beta").queue] == [b"another publisher is not held up"]
    assert beta.relay.accept(root.wire, "") == "stored"
    assert world.run_until(lambda: len(world.queue("beta").queue) == 42, 20)
    assert [i["content"] for i in world.queue("beta").queue][1:] == [m.content for m in chain]
    assert sub.mailbox.buffered == {} and not sub.mailbox.deferred
