"""A relay that restarts delivers nothing twice and loses nothing: its ledger and its cache say where it was."""

from __future__ import annotations

import pytest

from flowcast.causal.ledger import Ledger, LedgerCorrupt
from flowcast.causal.message import make
from tests.causal.kit import TOPIC, Causal, hashes, shown




def three_then_an_epoch(tmp_path):
    """alpha publishes three in epoch 0 and opens epoch 1; beta (grace 30 s) has delivered all four."""
    world = Causal(tmp_path, ("alpha", "beta"), config={"grace": 30.0, "heads_every": None})
    alpha, beta = world.services["alpha"], world.services["beta"]
    beta.subscribe(TOPIC, "inbox")
    old = [alpha.publish(TOPIC, b"epoch 0 #%d" % i) for i in range(3)]
    alpha.genesis(TOPIC)
    assert world.run_until(lambda: len(world.queue("beta").queue) == 4, 20)
    return world, beta, old

def delivered_twice_after_a_restart(world: Causal, name: str, published) -> list[bytes]:
    """Restart ``name`` (its subscription too) and say which of ``published`` its queue now holds twice."""
    world.stop(name)
    world.start(name).subscribe(TOPIC, "inbox")
    world.run_for(2.0)
    got = hashes(world.queue(name))
    return [p.msg.content for p in published if got.count(p.msg.hash.hex()) > 1]

def test_restart_delivers_each_message_once_and_the_rest_after(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "beta"))
    alpha = world.services["alpha"]
    world.services["beta"].subscribe(TOPIC, "inbox")
    sent = [alpha.publish(TOPIC, b"m%d" % i) for i in range(20)]
    assert world.run_until(lambda: len(world.queue("beta").queue) == 20, 20)
    before = hashes(world.queue("beta"))
    world.stop("beta")
    sent += [alpha.publish(TOPIC, b"n%d" % i) for i in range(10)]  # while beta is down
    world.queue("beta").queue.clear()  # what the flow took before the house went down
    beta = world.start("beta")
    assert beta.relay.counts == {} and len(beta.relay.index) == 20  # rebuilt from the cache
    sub = beta.subscribe(TOPIC, "inbox")
    assert world.run_until(lambda: len(world.queue("beta").queue) == 10, 20)
    after = hashes(world.queue("beta"))
    assert before + after == [p.msg.hash.hex() for p in sent]
    assert sub.mailbox.counts["duplicate"] == 0 and sub.delivered == 10
    own = beta.publish(TOPIC, b"after the restart")
    assert any(d.hash == sent[-1].msg.hash for d in own.msg.deps)


def test_a_restarted_publisher_continues_its_chain_instead_of_equivocating(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "beta"))
    alpha = world.services["alpha"]
    last = [alpha.publish(TOPIC, b"m%d" % i) for i in range(3)][-1]
    assert world.run_until(lambda: last.done, 10)
    world.stop("alpha")
    alpha = world.start("alpha")
    again = alpha.publish(TOPIC, b"after restart")
    assert again.msg.prev == last.msg.id
    world.run_for(2.0)
    assert world.services["beta"].relay.counts["equivocations"] == 0


def test_a_corrupt_ledger_is_refused_and_left_alone(tmp_path) -> None:
    path = tmp_path / "causal.sqlite3"
    path.write_bytes(b"not a database at all" * 100)
    with pytest.raises(LedgerCorrupt, match="causal.sqlite3"):
        Ledger(path)
    assert path.read_bytes() == b"not a database at all" * 100


def test_evidence_survives_a_restart(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "beta"), follow=False)
    bad = make(world.keys["alpha"], TOPIC, b"", epoch=1, deps=[], tags=["epoch", "x"])  # fine: the owner's genesis
    assert world.services["beta"].relay.accept(bad.wire, "alpha") == "stored"
    assert world.run_until(lambda: world.services["beta"].relay.current[TOPIC] == 1, 5)
    forged_genesis = make(world.keys["beta"], TOPIC, b"", epoch=2, tags=["epoch"])
    assert world.services["beta"].relay.accept(forged_genesis.wire, "alpha") == "bad_genesis"
    world.run_for(1.0)
    world.stop("beta")
    assert [e["hash"] for e in Ledger(tmp_path / "beta" / "causal.sqlite3").evidence()] == [forged_genesis.hash]


def test_a_restart_after_the_genesis_expired_from_the_cache_keeps_the_epoch(tmp_path) -> None:
    """Was: The relay infers its current epoch from the newest genesis *in the CAST cache*.  Once retention
    expired it (epochs last as long as the owner wants; retention is 24 h), a restarted relay goes back
    to epoch 0 and drops every honest message of the real current epoch as epoch_unknown."""
    world = Causal(tmp_path, ("alpha", "beta"), config={"grace": 5.0})
    for n in world.names:
        world.caches[n].retention = 100.0  # stands for the 24 h default; epochs may last longer
    alpha, beta = world.services["alpha"], world.services["beta"]
    beta.subscribe(TOPIC, "inbox")
    for _ in range(2):
        g = alpha.genesis(TOPIC)
        assert world.run_until(lambda: g.done and beta.relay.current[TOPIC] == g.msg.epoch, 10)
    world.run_for(150.0)  # the geneses expire; epoch 2 is still current
    world.stop("beta")
    beta = world.start("beta")
    beta.subscribe(TOPIC, "inbox")
    world.queue("beta").queue.clear()
    msg = alpha.publish(TOPIC, b"epoch 2 goes on")
    assert msg.msg.epoch == 2
    world.run_for(5.0)
    assert beta.relay.current[TOPIC] == 2, f"restarted relay thinks the epoch is {beta.relay.current[TOPIC]}; drops {dict(beta.relay.counts)}"
    assert hashes(world.queue("beta")) == [msg.msg.hash.hex()]


def test_after_a_restart_during_grace_the_closing_epoch_still_closes(tmp_path) -> None:
    """Was: rebuild() gives epoch n-1 a fresh grace, but nothing schedules _close_epoch for it: its buffered
    messages are never abandoned (no share, no event) and their missing deps are fetched for ever."""
    world = Causal(tmp_path, ("alpha", "beta"), config={"grace": 30.0, "heads_every": None})
    alpha, beta = world.services["alpha"], world.services["beta"]
    ghost = make(world.keys["alpha"], TOPIC, b"never sent")
    stuck = make(world.keys["alpha"], TOPIC, b"waits for the ghost", deps=[ghost.id])
    assert beta.relay.accept(stuck.wire, "alpha") == "stored"
    g = alpha.genesis(TOPIC)
    assert world.run_until(lambda: g.done and beta.relay.current[TOPIC] == 1, 10)
    world.stop("beta")
    beta = world.start("beta")
    sub = beta.subscribe(TOPIC, "inbox")
    assert stuck.hash in sub.mailbox.buffered
    world.run_for(120.0)  # four times the grace
    assert not beta.relay.is_open(TOPIC, 0)
    assert stuck.hash.hex() in shown(world, "beta", "abandoned"), "never reported abandoned"
    assert ghost.hash not in beta.sync.missing, "still fetched after its epoch closed"


def test_a_restart_after_an_epoch_closed_does_not_reopen_it_or_deliver_twice(tmp_path) -> None:
    """Was: Epoch 0 closed after the grace period: its delivered set was pruned from the ledger
    (Broker.close_epoch -> ledger.forget).  On restart Relay.rebuild() gives epoch current-1 a *fresh*
    grace whether or not it had closed already, re-indexes its messages from the cache (24 h retention)
    and the new subscription offers them to a mailbox that forgot it delivered them."""
    world, beta, old = three_then_an_epoch(tmp_path)
    world.run_for(60.0)  # epoch 0 closed at beta
    assert not beta.relay.is_open(TOPIC, 0)
    assert delivered_twice_after_a_restart(world, "beta", old) == []


def test_a_buffered_message_that_expired_from_the_cache_is_abandoned_with_what_names_it(tmp_path) -> None:
    """Was: flush() notes 'expired_from_storage' for a ready message it cannot read back, but the mailbox
    already counted it delivered, so its dependents are pushed: the flow sees m2 without ever seeing m1."""
    world = Causal(tmp_path, ("alpha", "beta"), follow=False, config={"heads_every": None})
    beta = world.services["beta"]
    world.caches["beta"].retention = 100.0
    beta.subscribe(TOPIC, "inbox")
    key = world.keys["alpha"]
    m0 = make(key, TOPIC, b"m0")
    m1 = make(key, TOPIC, b"m1", deps=[m0.id])
    assert beta.relay.accept(m1.wire, "alpha") == "stored"
    world.run_for(90.0)
    m2 = make(key, TOPIC, b"m2", deps=[m1.id])
    assert beta.relay.accept(m2.wire, "alpha") == "stored"  # arrives later: expires later
    world.run_for(20.0)  # m1 expired from the cache while buffered, m2 has not
    assert beta.relay.accept(m0.wire, "alpha") == "stored"
    world.run_for(2.0)
    assert hashes(world.queue("beta")) == [m0.hash.hex()]  # m2 is not delivered without m1
    abandoned = shown(world, "beta", "abandoned")
    assert abandoned[m1.hash.hex()]["reason"] == "expired_from_storage" and abandoned[m2.hash.hex()]["reason"] == "dep_expired"
    m3 = make(key, TOPIC, b"m3", deps=[m2.id])  # and what names them later is refused, not delivered
    assert beta.relay.accept(m3.wire, "alpha") == "stored"
    world.run_for(2.0)
    assert hashes(world.queue("beta")) == [m0.hash.hex()] and m3.hash.hex() in shown(world, "beta", "rejected")


def test_a_buffered_message_naming_one_that_expired_while_released_is_not_delivered_without_it(tmp_path) -> None:
    """Was: Broker._read_back abandons a released message that expired from the cache, and what was released
    *with it* naming it; but a message still buffered for another dep already had its wait count for
    the expired one decremented (Mailbox._release) and was taken off waiters[it].  Mailbox.undeliver does
    not touch it, so when its other dep arrives it is delivered: a delivery without its dep."""
    world = Causal(tmp_path, ("alpha", "beta"), follow=False, config={"heads_every": None})
    beta = world.services["beta"]
    world.caches["beta"].retention = 100.0
    beta.subscribe(TOPIC, "inbox")
    a, b = world.keys["alpha"], world.keys["beta"]
    m0 = make(a, TOPIC, b"m0")
    m1 = make(a, TOPIC, b"m1", deps=[m0.id])
    x = make(b, TOPIC, b"x")
    c = make(b, TOPIC, b"c names m1 and x", deps=[x.id, m1.id])
    assert beta.relay.accept(m1.wire, "alpha") == "stored"  # buffered: waits for m0
    world.run_for(95.0)
    assert beta.relay.accept(c.wire, "alpha") == "stored"  # buffered: waits for m1 and x; stored later, expires later
    world.run_for(15.0)  # m1 expired from the cache while buffered; c has not
    assert beta.relay.accept(m0.wire, "alpha") == "stored"  # releases m1 (unreadable -> abandoned); c still waits for x
    world.run_for(2.0)
    assert m1.hash.hex() in shown(world, "beta", "abandoned")
    assert beta.relay.accept(x.wire, "alpha") == "stored"
    world.run_for(2.0)
    got = hashes(world.queue("beta"))
    assert c.hash.hex() not in got, f"c delivered though its dep m1 never was: {[h[:8] for h in got]}"


def test_after_a_restart_publish_names_what_was_delivered_before_it(tmp_path) -> None:
    """Was: Publish's default deps are now the first subscription's delivered frontier (Mailbox.heads).  After
    a restart Broker.subscribe loads the delivered *set* (Mailbox.load, no heads), and the replay offers
    are all duplicates, so the frontier is empty: a reply published after a restart does not name the
    message it replies to (before 9217424 the relay's heads, rebuilt from the cache, were named)."""
    world = Causal(tmp_path, ("alpha", "beta"), config={"heads_every": None})
    alpha, beta = world.services["alpha"], world.services["beta"]
    beta.subscribe(TOPIC, "inbox")
    m = alpha.publish(TOPIC, b"a question")
    assert world.run_until(lambda: len(world.queue("beta").queue) == 1, 10)
    world.stop("beta")
    beta = world.start("beta")
    beta.subscribe(TOPIC, "inbox")
    world.run_for(1.0)
    reply = beta.publish(TOPIC, b"the answer, after seeing the question")
    assert m.msg.hash in {d.hash for d in reply.msg.deps}, f"the reply names {[d.hash.hex()[:8] for d in reply.msg.deps]}"


def test_an_epoch_whose_closing_was_interrupted_is_not_delivered_again_after_a_restart(tmp_path, monkeypatch) -> None:
    """Was: CausalService._close_epoch prunes each subscription's delivered set from the ledger
    (Broker.close_epoch -> Ledger.forget) before it records the epoch closed (Ledger.closed), in separate
    autocommitted statements.  A house that dies between the two (here: the second write fails) restarts
    with the epoch recorded open and its delivered set gone: Relay.rebuild gives it a fresh grace and its
    messages are delivered again."""
    world, beta, old = three_then_an_epoch(tmp_path)

    def dies(topic, epoch):  # the process dies right here
        raise OSError("the house died between the two writes")

    monkeypatch.setattr(beta.ledger, "closed", dies)
    world.run_for(40.0)  # epoch 0's closer runs at beta and cannot record the closing (nor raises out of its timer)
    # the closing was recorded first, so it failed before anything was pruned: the epoch stays whole
    assert 0 in beta.ledger.delivered("log>inbox") and beta.ledger.epochs()[TOPIC][1] == -1
    assert beta.counts["close_failed"] >= 1
    monkeypatch.undo()
    assert delivered_twice_after_a_restart(world, "beta", old) == []


def test_an_epoch_found_only_in_the_cache_at_restart_is_recorded_with_its_genesis(tmp_path) -> None:
    """Was: Relay.rebuild takes the current epoch from the newest genesis in the cache when it is newer than the
    ledger's record (a ledger from before the epochs table, or a crash between the store and
    Ledger.opened), but nothing writes it to the ledger.  Once the cache expires that genesis, the next
    restart falls back to epoch 0 -- the failure 889bfc0 fixed -- and drops the real epoch's messages."""
    world = Causal(tmp_path, ("alpha", "beta"), config={"grace": 5.0, "heads_every": None})
    for n in world.names:
        world.caches[n].retention = 100.0
    alpha, beta = world.services["alpha"], world.services["beta"]
    g = alpha.genesis(TOPIC)
    assert world.run_until(lambda: g.done and beta.relay.current[TOPIC] == 1, 10)
    world.stop("beta")
    Ledger(tmp_path / "beta" / "causal.sqlite3").db.execute("DELETE FROM epochs")  # as an older ledger has it
    beta = world.start("beta")
    assert beta.relay.current[TOPIC] == 1  # from the cache
    world.run_for(150.0)  # the genesis expires; epoch 1 is still current
    world.stop("beta")
    beta = world.start("beta")
    assert beta.relay.current[TOPIC] == 1
    first = beta.publish(TOPIC, b"beta's first message of epoch 1: it must name the genesis")
    assert first.error is None, f"refused: {first.error}; genesis known: {beta.relay.genesis.get((TOPIC, 1))}"
