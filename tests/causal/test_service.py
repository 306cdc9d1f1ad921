"""One topic between three estates on the simulated network: publish, forward, deliver in causal order."""

from __future__ import annotations

from tests.causal.kit import TOPIC, Causal, hashes


def test_a_message_published_at_one_estate_is_delivered_at_all(tmp_path) -> None:
    world = Causal(tmp_path)
    subs = {n: world.services[n].subscribe(TOPIC, "inbox") for n in world.names}
    first = world.services["alpha"].publish(TOPIC, b"hello")
    assert world.run_until(lambda: all(len(world.queue(n).queue) == 1 for n in world.names), 30)
    reply = world.services["beta"].publish(TOPIC, b"hi alpha")
    assert world.run_until(lambda: all(len(world.queue(n).queue) == 2 for n in world.names), 30)
    for n in world.names:
        assert hashes(world.queue(n)) == [first.msg.hash.hex(), reply.msg.hash.hex()]
        assert subs[n].delivered == 2
    assert first.msg.hash in {d.hash for d in reply.msg.deps}  # the frontier named what beta had seen
