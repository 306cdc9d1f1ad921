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


def test_a_message_the_disk_refused_claims_no_place_so_its_publisher_does_not_equivocate(tmp_path) -> None:
    """Was: Relay.accept records the claim/tip (and head) before storage.put; when put raises (busy, full)
    they stay.  The tip now names a message that does not exist, frontier() skips it, the next
    publish has no prev and claims (publisher, epoch, b'') again: an equivocation by an honest house."""
    world = Causal(tmp_path, ("alpha", "beta"), config={"heads_every": None})
    alpha = world.services["alpha"]
    first = alpha.publish(TOPIC, b"first")
    assert world.run_until(lambda: first.done, 10)
    real_put = alpha.storage.put

    def refuse(msg):
        raise RuntimeError("disk busy")

    alpha.storage.put = refuse
    failed = alpha.publish(TOPIC, b"refused by the disk")
    assert failed.error is not None
    alpha.storage.put = real_put
    again = alpha.publish(TOPIC, b"after the disk recovered")
    assert world.run_until(lambda: again.done, 10)
    world.run_for(2.0)
    equivocations = {n: world.services[n].relay.counts["equivocations"] for n in world.names}
    assert equivocations == {"alpha": 0, "beta": 0}, f"honest alpha equivocated (prev={again.msg.prev})"
