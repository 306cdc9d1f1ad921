"""What a person reads of a relay under a flood is complete: the shares and status fields say what is.

Issue 25, finding 9: ``causal.equivocations`` showed 102 of 151 equivocations
(the evidence cap returned before the share was written), and the status
field ``deferred`` counted deferral events, not the messages deferred now.
"""

from __future__ import annotations

from flowcast.causal.message import make
from tests.causal.kit import TOPIC, Causal, shown


def test_every_equivocation_is_shown_when_its_evidence_is_capped(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "beta"), follow=False, config={"heads_every": None, "evidence_cap": 20})
    beta = world.services["beta"]
    seen = []
    beta.hooks.add("equivocation", lambda topic, publisher, first, second: seen.append(second))
    first = make(world.keys["alpha"], TOPIC, b"the first with no prev")
    assert beta.relay.accept(first.wire, "alpha") == "stored"
    others = [make(world.keys["alpha"], TOPIC, b"also the first %d" % i) for i in range(51)]
    for msg in others:
        assert beta.relay.accept(msg.wire, "alpha") == "stored"
    assert world.run_until(lambda: all(m.hash in beta.relay.index for m in others), 10)
    assert beta.relay.counts["equivocations"] == 51
    assert set(shown(world, "beta", "equivocations")) == {m.hash.hex() for m in others}
    assert len(seen) == 51
    assert beta.counts["evidence_over_cap"] > 0  # the ledger holds the cap's worth; the share shows them all
    assert len([e for e in beta.ledger.evidence(TOPIC) if e["kind"] == "equivocation"]) <= 2 * 20


def test_deferred_in_status_counts_the_messages_deferred_now_not_the_deferrals(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "beta"), follow=False, config={"heads_every": None, "max_per_publisher": 2})
    beta = world.services["beta"]
    beta.subscribe(TOPIC, "inbox")
    key = world.keys["alpha"]
    chain = [make(key, TOPIC, b"root")]
    for i in range(10):
        chain.append(make(key, TOPIC, b"m%d" % i, deps=[chain[-1].id]))
    for msg in reversed(chain[1:]):  # backwards: two buffered, the rest deferred
        assert beta.relay.accept(msg.wire, "") == "stored"
    assert world.run_until(lambda: beta.relay.counts["stored"] == 10, 10)
    assert beta.status()["subscriptions"][0]["deferred"] == 8
    assert beta.relay.accept(chain[0].wire, "") == "stored"
    assert world.run_until(lambda: len(world.queue("beta").queue) == 11, 10)
    view = beta.status()["subscriptions"][0]
    assert view["deferred"] == 0 and view["buffered"] == 0 and view["deferrals"] >= 8
