"""Epochs: the owner's genesis opens one, the one before closes after the grace period, what waits is abandoned."""

from __future__ import annotations

from flowcast.causal.message import make
from tests.causal.kit import TOPIC, Causal, hashes, shown


def test_genesis_opens_an_epoch_and_the_old_one_closes_after_grace(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "beta"), config={"grace": 30.0})
    alpha, beta = world.services["alpha"], world.services["beta"]
    sub = beta.subscribe(TOPIC, "inbox")
    ghost = make(world.keys["alpha"], TOPIC, b"never sent")
    stuck = make(world.keys["alpha"], TOPIC, b"waits for the ghost", deps=[ghost.id])
    assert beta.relay.accept(stuck.wire, "alpha") == "stored"
    old = alpha.publish(TOPIC, b"epoch 0")
    assert world.run_until(lambda: len(world.queue("beta").queue) == 1, 10)
    opened = alpha.genesis(TOPIC)
    assert world.run_until(lambda: beta.relay.current[TOPIC] == 1 and len(world.queue("beta").queue) == 2, 10)
    assert world.queue("beta").queue[1]["tags"] == ["epoch"] and world.queue("beta").queue[1]["epoch"] == 1
    new = beta.publish(TOPIC, b"epoch 1")
    assert new.msg.epoch == 1 and opened.msg.hash in {d.hash for d in new.msg.deps}  # rule 6: names the genesis
    assert world.run_until(lambda: len(world.queue("beta").queue) == 3, 10)
    # epoch 0 is closing: still open for the grace period
    assert stuck.hash in sub.mailbox.buffered and beta.relay.is_open(TOPIC, 0)
    world.run_for(31.0)
    assert not beta.relay.is_open(TOPIC, 0)
    abandoned = world.estates["beta"].store("manor").share("causal.abandoned")[TOPIC]
    assert abandoned[stuck.hash.hex()]["missing"] == [ghost.hash.hex()]
    assert sub.mailbox.buffered == {} and 0 not in sub.mailbox.delivered
    assert ghost.hash not in beta.sync.missing  # no longer fetched
    assert old.msg.hash not in beta.relay.index  # pruned
    late = make(world.keys["alpha"], TOPIC, b"late", deps=[old.id])
    assert beta.relay.accept(late.wire, "alpha") == "epoch_closed"
    future = make(world.keys["alpha"], TOPIC, b"too far ahead", epoch=3)
    assert beta.relay.accept(future.wire, "alpha") == "epoch_unknown"
    assert len(world.queue("beta").queue) == 3


def test_a_message_of_the_next_epoch_waits_for_its_genesis(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "beta"), follow=False)
    beta = world.services["beta"]
    beta.subscribe(TOPIC, "inbox")
    genesis = make(world.keys["alpha"], TOPIC, b"", epoch=1, tags=["epoch"])
    early = make(world.keys["beta"], TOPIC, b"first of epoch 1", epoch=1, deps=[genesis.id])
    assert beta.relay.accept(early.wire, "alpha") == "stored"
    assert world.run_until(lambda: genesis.hash in beta.sync.missing, 5)
    assert beta.relay.accept(genesis.wire, "alpha") == "stored"
    assert world.run_until(lambda: len(world.queue("beta").queue) == 2, 5)
    assert [i["hash"] for i in world.queue("beta").queue] == [genesis.hash.hex(), early.hash.hex()]


def test_shape_rules_are_enforced_and_kept_as_evidence(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "beta"), follow=False)
    beta = world.services["beta"]
    not_owner = make(world.keys["beta"], TOPIC, b"", epoch=1, tags=["epoch"])
    assert beta.relay.accept(not_owner.wire, "alpha") == "bad_genesis"
    no_genesis = make(world.keys["beta"], TOPIC, b"epoch 1 from nowhere", epoch=1)
    assert beta.relay.accept(no_genesis.wire, "alpha") == "no_genesis_dep"
    a = make(world.keys["beta"], TOPIC, b"a")
    b = make(world.keys["beta"], TOPIC, b"b", deps=[a.id])
    two = make(world.keys["beta"], TOPIC, b"two own deps", deps=[a.id, b.id])
    assert beta.relay.accept(two.wire, "alpha") == "two_own_deps"
    kinds = {(e["hash"], e["kind"]) for e in beta.ledger.evidence(TOPIC)}
    assert kinds == {(not_owner.hash, "bad_genesis"), (no_genesis.hash, "no_genesis_dep"), (two.hash, "two_own_deps")}
    assert beta.relay.counts["stored"] == 0 and beta.relay.pending == {}


def test_the_owner_opens_epochs_on_a_configured_period(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "beta"), config={"epoch_every": 60.0, "grace": 10.0})
    beta = world.services["beta"]
    beta.subscribe(TOPIC, "inbox")
    world.run_for(185.0)
    assert beta.relay.current[TOPIC] == 3 and world.services["alpha"].relay.current[TOPIC] == 3
    assert [i["epoch"] for i in world.queue("beta").queue] == [1, 2, 3]


def test_evidence_is_capped_per_publisher_so_a_flood_costs_no_disk(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "beta"), follow=False, config={"evidence_cap": 5})
    beta = world.services["beta"]
    for i in range(50):
        junk = make(world.keys["alpha"], TOPIC, b"%d" % i, epoch=1)  # no genesis dep: bad shape, signed
        assert beta.relay.accept(junk.wire, "alpha") == "no_genesis_dep"
    assert len(beta.ledger.evidence(TOPIC)) == 5 and beta.counts["evidence_over_cap"] == 45



def deferred_behind_a_ghost(world: Causal):
    """alpha's chain of six at beta, its first naming a dep that never existed: two buffered, the rest deferred."""
    beta = world.services["beta"]
    sub = beta.subscribe(TOPIC, "inbox")
    key = world.keys["alpha"]
    ghost = make(key, TOPIC, b"never sent")
    chain = [make(key, TOPIC, b"m0", deps=[ghost.id])]
    for i in range(1, 6):
        chain.append(make(key, TOPIC, b"m%d" % i, deps=[chain[-1].id]))
    for msg in chain:
        assert beta.relay.accept(msg.wire, "alpha") == "stored"
    world.run_for(1.0)
    assert sub.mailbox.deferred
    return beta, key, chain

def test_deferred_messages_of_a_closed_epoch_are_reported_abandoned(tmp_path) -> None:
    """Was: Over the per-publisher cap a message is only a seq; when its epoch closes the buffered ones
    are reported abandoned, the deferred ones are not reported anywhere."""
    world = Causal(tmp_path, ("alpha", "beta"), follow=False,
                   config={"grace": 10.0, "max_per_publisher": 2, "max_buffered": 4, "heads_every": None})
    beta, key, chain = deferred_behind_a_ghost(world)
    g = make(key, TOPIC, b"", epoch=1, tags=["epoch"])
    assert beta.relay.accept(g.wire, "alpha") == "stored"
    world.run_for(30.0)
    abandoned = shown(world, "beta", "abandoned")
    delivered = set(hashes(world.queue("beta")))
    silent = [m.content for m in chain if m.hash.hex() not in abandoned and m.hash.hex() not in delivered]
    assert silent == [], f"never delivered and never reported: {silent}"


def test_deferred_messages_of_an_epoch_closed_at_once_are_reported_abandoned(tmp_path) -> None:
    """Was: Relay.open_epoch prunes the index of epochs before n-1 *before* calling _on_epoch, and
    CausalService._opened then closes those epochs 'at once' through Broker.close_epoch, which finds the
    deferred messages in the relay's index -- already pruned.  So when epoch n+1 opens while n-1 is still
    in grace, n-1's deferred messages are never delivered and never reported (the doc: reported
    abandoned 'from the relay's index before it is pruned')."""
    world = Causal(tmp_path, ("alpha", "beta"), follow=False,
                   config={"grace": 100.0, "max_per_publisher": 2, "max_buffered": 4, "heads_every": None})
    beta, key, chain = deferred_behind_a_ghost(world)
    for epoch in (1, 2):  # epoch 0 is still in grace when epoch 2 opens: it closes at once
        g = make(key, TOPIC, b"", epoch=epoch, tags=["epoch"])
        assert beta.relay.accept(g.wire, "alpha") == "stored"
        world.run_for(1.0)
    assert not beta.relay.is_open(TOPIC, 0)
    abandoned = shown(world, "beta", "abandoned")
    delivered = set(hashes(world.queue("beta")))
    silent = [m.content for m in chain if m.hash.hex() not in abandoned and m.hash.hex() not in delivered]
    assert silent == [], f"never delivered and never reported: {silent}"
