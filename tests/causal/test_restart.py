"""A relay that restarts delivers nothing twice and loses nothing: its ledger and its cache say where it was."""

from __future__ import annotations

import pytest

from flowcast.causal.ledger import Ledger, LedgerCorrupt
from flowcast.causal.message import make
from tests.causal.kit import TOPIC, Causal, hashes


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
