"""Predicate 2: the application's judgement stops delivery, not dissemination, and keeps the proof."""

from __future__ import annotations

from tests.causal.kit import TOPIC, Causal


def test_an_invalid_message_is_forwarded_everywhere_but_not_delivered_where_the_predicate_refuses(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "beta", "gamma"))

    def no_shouting(msg):
        return "shouting" if msg.content.isupper() else True

    world.services["beta"].subscribe(TOPIC, "inbox", predicate=no_shouting)
    world.services["gamma"].subscribe(TOPIC, "inbox")  # no predicate here
    alpha = world.services["alpha"]
    calm = alpha.publish(TOPIC, b"hello")
    loud = alpha.publish(TOPIC, b"HELLO")
    after = alpha.publish(TOPIC, b"sorry")  # names loud (its own previous): rejected with it at beta
    assert world.run_until(lambda: len(world.queue("gamma").queue) == 3, 20)
    assert world.run_until(lambda: world.services["beta"].relay.counts["stored"] == 3, 20)
    world.run_for(1.0)
    beta = world.services["beta"]
    assert [i["content"] for i in world.queue("beta").queue] == [b"hello"]
    rejected = world.estates["beta"].store("manor").share("causal.rejected")[TOPIC]
    assert rejected[loud.msg.hash.hex()]["reason"] == "shouting"
    assert rejected[after.msg.hash.hex()]["reason"] == "dep_rejected"
    (kept,) = beta.ledger.evidence(TOPIC)
    assert (kept["hash"], kept["kind"], kept["reason"], kept["wire"]) == (loud.msg.hash, "predicate", "shouting", loud.msg.wire)
    assert calm.msg.hash in beta.relay.index and loud.msg.hash in beta.relay.index  # stored: the proof travels


def test_a_predicate_that_raises_refuses_the_message_and_the_house_goes_on(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "beta"))

    def broken(msg):
        if msg.content == b"boom":
            raise KeyError("no such field")
        return True

    sub = world.services["beta"].subscribe(TOPIC, "inbox", predicate=broken)
    alpha = world.services["alpha"]
    alpha.publish(TOPIC, b"boom", deps=[])
    fine = alpha.publish(TOPIC, b"fine", deps=[])  # names boom anyway: its own previous
    other = world.services["beta"].publish(TOPIC, b"unrelated", deps=[])
    assert world.run_until(lambda: sub.rejected == 2 and len(world.queue("beta").queue) == 1, 20)
    assert world.queue("beta").queue[0]["hash"] == other.msg.hash.hex() and fine.msg.prev is not None
    assert world.services["beta"].broker.counts["predicate_failed"] == 1
