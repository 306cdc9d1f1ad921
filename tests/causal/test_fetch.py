"""Missing dependencies are fetched, from the relay that sent the dependent message first."""

from __future__ import annotations

from flowcast.causal.message import make
from flowcast.routing import Route
from tests.causal.kit import TOPIC, Causal, hashes


def test_a_missing_dep_is_fetched_from_the_relay_that_sent_the_message(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "gamma"), follow=False)  # nothing flows unasked: only fetches
    alpha, gamma = world.services["alpha"], world.services["gamma"]
    sub = gamma.subscribe(TOPIC, "inbox")
    first = alpha.publish(TOPIC, b"question")
    second = alpha.publish(TOPIC, b"follow-up")  # names first (its own previous)
    assert world.run_until(lambda: first.done and second.done, 10)
    seen: list[dict] = []
    share = world.estates["gamma"].store("manor").share("causal.missing")
    share.watchers.append(lambda s: seen.append(dict(s[TOPIC])))
    assert gamma.relay.accept(second.msg.wire, "alpha") == "stored"
    assert world.run_until(lambda: len(world.queue("gamma").queue) == 2, 10)
    assert list(seen[0]) == [first.msg.hash.hex()]  # the gap was visible while it lasted
    assert seen[0][first.msg.hash.hex()]["tries"] == 0 and seen[1][first.msg.hash.hex()]["asked"] == "alpha"
    assert hashes(world.queue("gamma")) == [first.msg.hash.hex(), second.msg.hash.hex()]
    assert gamma.sync.counts["fetched"] == 1 and gamma.sync.missing == {}
    assert world.estates["gamma"].store("manor").share("causal.missing")[TOPIC] == {}
    assert sub.mailbox.buffered == {} and alpha.sync.counts["fetch_served"] == 1


def test_a_dep_nobody_has_stays_missing_and_is_asked_for_with_growing_intervals(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "beta", "gamma"), follow=False)
    gamma = world.services["gamma"]
    gamma.subscribe(TOPIC, "inbox")
    ghost = make(world.keys["alpha"], TOPIC, b"never sent")  # signed, never disseminated
    orphan = make(world.keys["alpha"], TOPIC, b"names the ghost", deps=[ghost.id])
    assert gamma.relay.accept(orphan.wire, "alpha") == "stored"
    assert world.run_until(lambda: ghost.hash in gamma.sync.missing, 5)
    asked = []
    for _ in range(6):
        before = gamma.sync.missing[ghost.hash].tries
        assert world.run_until(lambda: gamma.sync.missing[ghost.hash].tries > before, 120)
        asked.append((world.world.scheduler.clock.now(), gamma.sync.missing[ghost.hash].asked))
    gaps = [b[0] - a[0] for a, b in zip(asked, asked[1:])]
    assert gaps[-1] > 2 * gaps[0]  # back-off, not a fixed rate
    assert {who for _t, who in asked} == {"alpha", "beta"}  # the sender first, then the other peer
    assert asked[0][1] == "alpha"
    assert len(world.queue("gamma").queue) == 0 and orphan.hash in gamma.broker.subs["log>inbox"].mailbox.buffered


def test_a_dep_whose_signature_is_bad_is_rejected_and_never_fetched(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "gamma"), follow=False)
    gamma = world.services["gamma"]
    gamma.subscribe(TOPIC, "inbox")
    real = make(world.keys["alpha"], TOPIC, b"real")
    forged_ref = real.id._replace(hsig=bytes(64))
    orphan = make(world.keys["alpha"], TOPIC, b"names a forged id", deps=[forged_ref])
    assert gamma.relay.accept(orphan.wire, "alpha") == "stored"
    world.run_for(2.0)
    assert gamma.sync.missing == {} and gamma.sync.counts["fetches"] == 0
    rejected = world.estates["gamma"].store("manor").share("causal.rejected")[TOPIC]
    # the message making the forged reference is rejected (and kept as proof), not the id it names
    assert rejected[orphan.hash.hex()]["reason"] == "bad_dep_signature" and real.hash.hex() not in rejected
    assert [e["hash"] for e in gamma.ledger.evidence(TOPIC)] == [orphan.hash]
    assert gamma.relay.accept(real.wire, "alpha") == "stored"  # the real message is not censored by it
    assert world.run_until(lambda: len(world.queue("gamma").queue) == 1, 5)


def test_hostile_fetches_are_refused_and_counted(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "gamma"), follow=False)
    router = world.estates["gamma"]["manor"]
    to_alpha = Route("causal", "", "alpha", "")
    bad = [None, b"x", {"topic": "log"}, {"topic": 5, "want": []}, {"topic": "nope", "want": []},
           {"topic": "log", "want": [b"short"]}, {"topic": "log", "want": [bytes(32)] * 65}]
    for data in bad:
        router.send(to_alpha, data, src="causal", tag="causal.fetch")
    world.run_for(2.0)
    alpha = world.services["alpha"]
    assert alpha.sync.counts["fetch_asked"] == 0
    assert world.world.scheduler.clock.now() > 0 and alpha.relay.counts["stored"] == 0
    router.send(to_alpha, {"topic": "log", "want": [bytes(32)]}, src="causal", tag="causal.fetch")
    world.run_for(1.0)
    assert alpha.sync.counts["fetch_asked"] == 1  # the router still serves after the bad ones


def test_a_fetch_reads_little_more_than_it_answers(tmp_path) -> None:
    """Was: Sync._on_fetch reads every wanted message from the cache (up to 64 x 80 KiB) and only then
    trims the answer to HAVE_BYTES: each 2 KiB causal.fetch costs ~5 MiB of reads and decoding
    of rows it throws away, and the asker may repeat it at will."""
    world = Causal(tmp_path, ("alpha", "gamma"), follow=False, config={"heads_every": None})
    alpha = world.services["alpha"]
    sent = [alpha.publish(TOPIC, bytes([i]) * 60_000, deps=[]) for i in range(64)]
    assert world.run_until(lambda: all(p.done for p in sent), 30)
    read = [0]
    real = alpha.storage.get

    def counting(seqs):
        out = real(seqs)
        read[0] += sum(len(w) for w in out.values())
        return out

    alpha.storage.get = counting
    world.estates["gamma"]["manor"].send(Route("causal", "", "alpha", ""), {"topic": TOPIC, "want": [p.msg.hash for p in sent]},
                                         src="causal", tag="causal.fetch")
    assert world.run_until(lambda: alpha.sync.counts["fetch_asked"] == 1, 10)
    from flowcast.causal.sync import HAVE_BYTES
    assert read[0] <= 2 * HAVE_BYTES, f"read {read[0]} bytes to answer at most {HAVE_BYTES}"
