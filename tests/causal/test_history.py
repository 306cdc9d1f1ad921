"""How much history one publisher may make a relay hold in one epoch (docs/causal.md, "Budgets").

Issue 25, finding 9: with the default layout epoch 0 never closes, so one
authorized publisher could grow every relay without limit.  Past its
budget (messages or wire bytes) a publisher's messages of that epoch are
refused ``epoch_full``: counted, shown in status, never silent; the others
go on, and so does the publisher once the owner opens the next epoch.
"""

from __future__ import annotations

from flowcast.causal.message import make
from tests.causal.kit import TOPIC, Causal


def _chain(key, n: int, epoch: int = 0, first=()):
    out = [make(key, TOPIC, b"m0", epoch=epoch, deps=list(first))]
    for i in range(1, n):
        out.append(make(key, TOPIC, b"m%d" % i, epoch=epoch, deps=[out[-1].id]))
    return out


def test_past_its_epoch_budget_a_publisher_is_refused_visibly_and_the_others_go_on(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "beta"), follow=False, config={"heads_every": None, "epoch_max_messages": 5})
    beta = world.services["beta"]
    beta.subscribe(TOPIC, "inbox")
    dropped = []
    beta.hooks.add("dropped", lambda topic, reason, source, publisher: dropped.append(reason))
    chain = _chain(world.keys["alpha"], 8)
    outcomes = [beta.relay.accept(m.wire, "alpha") for m in chain]
    assert outcomes == ["stored"] * 5 + ["epoch_full"] * 3
    assert dropped.count("epoch_full") == 3 and beta.relay.counts["dropped_epoch_full"] == 3
    view = beta.status()["topics"][TOPIC]
    assert view["full"] == {chain[0].publisher.hex(): {"epoch": 0, "refused": 3}} and view["held"] == 5
    mine = beta.publish(TOPIC, b"another publisher is not refused")
    assert world.run_until(lambda: mine.done, 10) and mine.error is None
    assert world.run_until(lambda: len(world.queue("beta").queue) == 6, 10)


def test_the_byte_budget_refuses_too_and_the_next_epoch_starts_afresh(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "beta"), follow=False, config={"heads_every": None, "epoch_max_bytes": 2500})
    alpha, beta = world.services["alpha"], world.services["beta"]
    key = world.keys["beta"]
    big = [make(key, TOPIC, b"x" * 900)]
    big.append(make(key, TOPIC, b"y" * 900, deps=[big[0].id]))
    big.append(make(key, TOPIC, b"z" * 900, deps=[big[1].id]))
    assert [alpha.relay.accept(m.wire, "beta") for m in big] == ["stored", "stored", "epoch_full"]
    refused = beta.publish(TOPIC, b"w" * 900)  # beta's own relay holds none of them: its own history is its own
    assert world.run_until(lambda: refused.done, 10) and refused.error is None
    genesis = alpha.genesis(TOPIC)
    assert world.run_until(lambda: genesis.done and alpha.relay.current[TOPIC] == 1, 10)
    fresh = make(key, TOPIC, b"v" * 900, epoch=1, deps=[genesis.msg.id])
    assert alpha.relay.accept(fresh.wire, "beta") == "stored"


def test_a_local_publish_over_the_budget_is_refused_with_the_reason(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha",), follow=False, config={"heads_every": None, "epoch_max_messages": 2})
    alpha = world.services["alpha"]
    tickets = [alpha.publish(TOPIC, b"%d" % i) for i in range(3)]
    assert world.run_until(lambda: all(t.done for t in tickets), 10)
    assert [t.error.reason if t.error else None for t in tickets] == [None, None, "epoch_full"]
