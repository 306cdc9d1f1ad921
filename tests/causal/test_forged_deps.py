"""A forged reference to a real message is refused whatever the order and batching of its arrival.

Issue 25, finding 9: a message naming a real dep with a forged dep
signature was stored, forwarded and delivered when it arrived in the same
batch as that dep, because the relay compared the named signature only
with stored messages, not with those still waiting for their disk write.
Two estates then ended with different delivered sets.
"""

from __future__ import annotations

import pytest

from flowcast.causal.message import TopicMsgID, make
from tests.causal.kit import TOPIC, Causal, hashes


def _pair(world: Causal):
    d = make(world.keys["alpha"], TOPIC, b"a real message")
    forged = make(world.keys["alpha"], TOPIC, b"names it with a forged signature",
                  deps=[TopicMsgID(d.publisher, d.hash, bytes(64))])
    return d, forged


def test_a_forged_reference_to_a_pending_dep_is_refused_at_the_relay(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "beta"), follow=False, config={"heads_every": None})
    beta = world.services["beta"]
    beta.subscribe(TOPIC, "inbox")
    d, forged = _pair(world)
    assert beta.relay.accept(d.wire, "alpha") == "stored"
    assert d.hash in beta.relay.pending  # one batch: the dep has not reached the disk yet
    assert beta.relay.accept(forged.wire, "alpha") == "bad_dep_signature"
    assert world.run_until(lambda: d.hash.hex() in hashes(world.queue("beta")), 10)
    world.run_for(2.0)
    assert hashes(world.queue("beta")) == [d.hash.hex()]
    assert forged.hash not in beta.relay.index and forged.hash in beta.relay.rejected


@pytest.mark.parametrize("subscribed_first", [True, False])
def test_a_forged_reference_stored_before_its_dep_is_never_delivered(tmp_path, subscribed_first: bool) -> None:
    """The forged one first, its dep in the same batch: it is stored (its dep was unknown when it came), but
    never delivered -- also to a subscription made after both are stored."""
    world = Causal(tmp_path, ("alpha", "beta"), follow=False, config={"heads_every": None})
    beta = world.services["beta"]
    if subscribed_first:
        beta.subscribe(TOPIC, "inbox")
    d, forged = _pair(world)
    assert beta.relay.accept(forged.wire, "alpha") == "stored"
    assert beta.relay.accept(d.wire, "alpha") == "stored"
    assert world.run_until(lambda: d.hash in beta.relay.index and forged.hash in beta.relay.index, 10)
    if not subscribed_first:
        beta.subscribe(TOPIC, "inbox")
    assert world.run_until(lambda: d.hash.hex() in hashes(world.queue("beta")), 10)
    world.run_for(2.0)
    assert hashes(world.queue("beta")) == [d.hash.hex()]
    rejected = world.estates["beta"].store("manor").share("causal.rejected").get(TOPIC) or {}
    assert rejected[forged.hash.hex()]["reason"] == "bad_dep_signature"
