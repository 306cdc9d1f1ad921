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
    assert len(sub.mailbox.deferred) == 40 - 5  # remembered as a seq each, under the dep it waits for
    assert [i["content"] for i in world.queue("beta").queue] == [b"another publisher is not held up"]
    assert beta.relay.accept(root.wire, "") == "stored"
    assert world.run_until(lambda: len(world.queue("beta").queue) == 42, 20)
    assert [i["content"] for i in world.queue("beta").queue][1:] == [m.content for m in chain]
    assert sub.mailbox.buffered == {} and not sub.mailbox.deferred


def _chain(key, n: int, first_deps=()):
    chain = [make(key, TOPIC, b"root", deps=list(first_deps))]
    for i in range(n):
        chain.append(make(key, TOPIC, b"m%d" % i, deps=[chain[-1].id]))
    return chain


def test_a_chain_arriving_backwards_over_the_cap_is_delivered_in_order_by_waking_what_waits_for_each_delivery(tmp_path) -> None:
    """Was: the buffer filled with the chain's tail, everything nearer the root was deferred, and
    nothing asked for the root (only buffered messages' deps were fetched): nothing was ever delivered."""
    world = Causal(tmp_path, ("alpha", "beta"), follow=False, config={"max_per_publisher": 5, "max_buffered": 8})
    alpha, beta = world.services["alpha"], world.services["beta"]
    sub = beta.subscribe(TOPIC, "inbox")
    chain = _chain(world.keys["alpha"], 200)
    for msg in chain:
        assert alpha.relay.accept(msg.wire) == "stored"
    for msg in reversed(chain[1:]):  # the root only alpha holds
        assert beta.relay.accept(msg.wire, "alpha") == "stored"
    most = []
    share = world.queue("beta")
    share.watchers.append(lambda s: most.append(len(sub.mailbox.buffered)))
    assert world.run_until(lambda: len(world.queue("beta").queue) == 201, 60), (sub.mailbox.stats(), beta.sync.counts)
    assert [i["content"] for i in world.queue("beta").queue] == [m.content for m in chain]
    assert max(most) <= 5 and sub.mailbox.buffered == {}
    assert beta.sync.counts["wanted_deferred"] >= 1  # the root was asked for on behalf of a deferred message
    # each deferred message is offered again when the one dep it waits under is delivered: about once each
    assert 190 <= beta.broker.counts["reoffered"] <= 2 * 200


def test_deferred_messages_that_wait_on_another_publisher_are_delivered_by_the_backstop(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "beta"), follow=False, config={"max_per_publisher": 4, "max_buffered": 6})
    beta = world.services["beta"]
    sub = beta.subscribe(TOPIC, "inbox")
    p_chain = _chain(world.keys["alpha"], 30)
    # beta's own chain: each of its messages names its previous and one of alpha's
    q_key = world.keys["beta"]
    q_chain = [make(q_key, TOPIC, b"q0", deps=[p_chain[0].id])]
    for i in range(1, 30):
        q_chain.append(make(q_key, TOPIC, b"q%d" % i, deps=[q_chain[-1].id, p_chain[i].id]))
    for msg in reversed(q_chain):
        assert beta.relay.accept(msg.wire, "") == "stored"
    for msg in reversed(p_chain):
        assert beta.relay.accept(msg.wire, "") == "stored"
    assert world.run_until(lambda: len(world.queue("beta").queue) == 61, 120), (sub.mailbox.stats(), beta.broker.counts)
    delivered = [i["hash"] for i in world.queue("beta").queue]
    position = {h: n for n, h in enumerate(delivered)}
    for msg in p_chain + q_chain:
        assert all(position[d.hash.hex()] < position[msg.hash.hex()] for d in msg.deps)
    assert len(sub.mailbox.buffered) == 0 and not sub.mailbox.deferred


def test_honest_deliveries_do_not_reread_a_flooding_publishers_deferred_messages(tmp_path, monkeypatch) -> None:
    """Was: The backstop in Broker.resume re-reads, decodes and re-offers every deferred message of a
    publisher (scanning the whole relay index) once a second whenever *anything* was delivered.
    N stored junk messages thus cost O(N) work per second of honest traffic, for the epoch's life."""
    from flowcast.causal import broker as broker_mod
    from flowcast.causal import sync

    monkeypatch.setattr(sync, "MAX_UNWAITED", 20)
    world = Causal(tmp_path, ("alpha", "beta", "gamma"), follow=False,
                   config={"max_per_publisher": 10, "max_buffered": 50, "heads_every": None})
    gamma = world.services["gamma"]
    gamma.subscribe(TOPIC, "inbox")
    key = world.keys["alpha"]
    n = 600
    for i in range(n):
        ghost = make(key, TOPIC, b"g%d" % i)
        assert gamma.relay.accept(make(key, TOPIC, b"junk %d" % i, deps=[ghost.id]).wire, "alpha") == "stored"
    world.run_for(2.0)
    decodes = [0]
    real = broker_mod.decode

    def counting(wire):
        decodes[0] += 1
        return real(wire)

    monkeypatch.setattr(broker_mod, "decode", counting)
    beta = world.services["beta"]
    for i in range(20):  # honest traffic, one message a second
        assert gamma.relay.accept(beta.publish(TOPIC, b"honest %d" % i, deps=[]).msg.wire, "beta") == "stored"
        world.run_for(1.0)
    assert len(world.queue("gamma").queue) == 20
    assert decodes[0] <= 2 * 20, f"{decodes[0]} re-reads of stored messages for 20 honest deliveries ({n} junk)"


def test_a_flood_of_deferred_messages_naming_ghosts_does_not_stop_an_honest_chain_arriving_backwards(tmp_path, monkeypatch) -> None:
    """Was: Deps of deferred messages are wanted with why='deferred', counted against MAX_UNWAITED with no
    per-publisher share, and (unlike heads) never given up on 'none': they stay until the epoch closes.
    A valid publisher's flood naming distinct ghosts fills the cap, and then an honest chain that arrives
    backwards over the per-publisher cap deadlocks again (the 659f3af bug): its root, named only by a
    deferred message, is 'unwaited_over_cap' and nothing else ever asks for it.  (Announced heads are
    refused 'over_cap' for the epoch's life the same way.)"""
    from flowcast.causal import sync

    monkeypatch.setattr(sync, "MAX_UNWAITED", 20)  # stands for 4,096
    world = Causal(tmp_path, ("alpha", "beta", "gamma"), follow=False,
                   config={"max_per_publisher": 5, "max_buffered": 50, "heads_every": None})
    alpha, gamma = world.services["alpha"], world.services["gamma"]
    gamma.subscribe(TOPIC, "inbox")
    junk_key = world.keys["alpha"]
    for i in range(60):
        ghost = make(junk_key, TOPIC, b"ghost %d" % i)
        assert gamma.relay.accept(make(junk_key, TOPIC, b"junk %d" % i, deps=[ghost.id]).wire, "alpha") == "stored"
    world.run_for(2.0)
    key = world.keys["beta"]
    chain = [make(key, TOPIC, b"root")]
    for i in range(30):
        chain.append(make(key, TOPIC, b"c%d" % i, deps=[chain[-1].id]))
    for msg in chain:
        assert alpha.relay.accept(msg.wire) == "stored"
    for msg in reversed(chain[1:]):  # the root only alpha holds
        assert gamma.relay.accept(msg.wire, "alpha") == "stored"
    world.run_for(60.0)
    got = [i["content"] for i in world.queue("gamma").queue]
    assert got == [m.content for m in chain], (
        f"delivered {len(got)} of {len(chain)}; root wanted: {chain[0].hash in gamma.sync.missing}; {dict(gamma.sync.counts)}")
