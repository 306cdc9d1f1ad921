"""Heads exchange: what nothing names still reaches every relay, and announcements cannot be abused."""

from __future__ import annotations

from nacl.signing import SigningKey

from flowcast.causal.message import make
from flowcast.routing import Route
from tests.causal.kit import TOPIC, Causal, hashes, shown, step_until


def test_a_relay_that_follows_nobody_gets_everything_through_heads_in_causal_order(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "gamma"), follow=False, config={"heads_every": 2.0})
    alpha, gamma = world.services["alpha"], world.services["gamma"]
    gamma.subscribe(TOPIC, "inbox")
    sent = [alpha.publish(TOPIC, b"m%d" % i) for i in range(5)]  # a chain: only the last is a head
    assert world.run_until(lambda: len(world.queue("gamma").queue) == 5, 30)
    assert hashes(world.queue("gamma")) == [p.msg.hash.hex() for p in sent]
    assert gamma.sync.counts["wanted_heads"] == 1  # the head; the rest were fetched as its deps
    assert gamma.heads.counts["heads_heard"] >= 1 and gamma.sync.missing == {}


def test_unchanged_heads_are_not_announced_every_period(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "gamma"), config={"heads_every": 1.0})
    alpha = world.services["alpha"]
    alpha.publish(TOPIC, b"one")
    world.run_for(2.5)
    first = alpha.heads.counts["heads_sent"]
    assert first >= 1
    world.run_for(4.0)  # four periods, nothing new: fewer than one announcement per period
    assert alpha.heads.counts["heads_sent"] == first
    world.run_for(4.0)  # the refresh comes round
    assert alpha.heads.counts["heads_sent"] == first + 1


def test_announced_heads_nobody_signed_or_of_a_closed_epoch_are_not_fetched(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "gamma"), follow=False, config={"heads_every": None, "grace": 1.0})
    gamma = world.services["gamma"]
    router = world.estates["alpha"]["manor"]
    to_gamma = Route("causal", "", "gamma", "")
    real = make(world.keys["alpha"], TOPIC, b"x")
    mallory = SigningKey(b"q" * 32)
    fake = make(mallory, TOPIC, b"y")
    heads = [[real.publisher, real.hash, bytes(64)],            # a forged hsig
             [fake.publisher, fake.hash, fake.hsig],            # signed, by no publisher of the topic
             [real.publisher, real.hash[:31], real.hsig],       # bad shape
             "junk"]
    router.send(to_gamma, {"topic": TOPIC, "epoch": 0, "heads": heads}, src="causal", tag="causal.heads")
    assert world.run_until(lambda: gamma.heads.counts["heads_heard"] == 1, 10)
    assert gamma.heads.counts["heads_bad_signature"] == 2 and gamma.heads.counts["bad_heads"] == 2
    assert gamma.sync.missing == {} and gamma.sync.counts["fetches"] == 0
    genesis = make(world.keys["alpha"], TOPIC, b"", epoch=1, tags=["epoch"])
    assert gamma.relay.accept(genesis.wire, "alpha") == "stored"
    world.run_for(2.0)  # epoch 0 is closed now
    router.send(to_gamma, {"topic": TOPIC, "epoch": 0, "heads": [[real.publisher, real.hash, real.hsig]]}, src="causal", tag="causal.heads")
    assert world.run_until(lambda: gamma.heads.counts["heads_epoch_closed"] == 1, 10)
    assert gamma.sync.missing == {}


def test_hostile_announcements_are_refused_and_the_router_goes_on(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "gamma"), follow=False, config={"heads_every": None})
    gamma = world.services["gamma"]
    router = world.estates["alpha"]["manor"]
    to_gamma = Route("causal", "", "gamma", "")
    real = make(world.keys["alpha"], TOPIC, b"x")
    for data in (None, [], {"topic": TOPIC}, {"topic": TOPIC, "epoch": "0", "heads": []}, {"topic": "nope", "epoch": 0, "heads": []},
                 {"topic": TOPIC, "epoch": 0, "heads": [[real.publisher, real.hash, real.hsig]] * 65}):
        router.send(to_gamma, data, src="causal", tag="causal.heads")
    world.run_for(2.0)
    assert gamma.heads.counts["bad_heads"] == 6 and gamma.heads.counts["heads_heard"] == 0
    assert world.services["alpha"].relay.accept(real.wire) == "stored"
    router.send(to_gamma, {"topic": TOPIC, "epoch": 0, "heads": [[real.publisher, real.hash, real.hsig]]}, src="causal", tag="causal.heads")
    gamma.subscribe(TOPIC, "inbox")
    assert world.run_until(lambda: len(world.queue("gamma").queue) == 1, 20)  # fetched from the announcer


def test_wanted_heads_are_capped(tmp_path, monkeypatch) -> None:
    from flowcast.causal import sync

    monkeypatch.setattr(sync, "MAX_UNWAITED", 3)
    world = Causal(tmp_path, ("alpha", "gamma"), follow=False, config={"heads_every": None})
    gamma = world.services["gamma"]
    router = world.estates["alpha"]["manor"]
    ids = [make(world.keys["alpha"], TOPIC, b"%d" % i, deps=[]) for i in range(5)]
    heads = [[m.publisher, m.hash, m.hsig] for m in ids]
    router.send(Route("causal", "", "gamma", ""), {"topic": TOPIC, "epoch": 0, "heads": heads}, src="causal", tag="causal.heads")
    assert world.run_until(lambda: gamma.heads.counts["heads_heard"] == 1, 10)
    assert gamma.heads.counts["heads_wanted"] == 3 and gamma.heads.counts["heads_over_cap"] == 2
    # alpha announced them but holds none of them: once it says so, they are asked for no more
    assert world.run_until(lambda: gamma.sync.counts["heads_unavailable"] == 3, 10)
    assert gamma.sync.missing == {} and gamma.sync._unwaited() == 0


def test_signed_ghost_heads_from_one_peer_do_not_crowd_out_honest_heads(tmp_path, monkeypatch) -> None:
    """Was: A hostile peer with a publisher key signs random hashes (no message needed) and announces them
    as heads.  They count against MAX_UNWAITED until their epoch closes -- which may be never -- so
    the honest heads a relay missed are 'over_cap' at every announcement and never fetched."""
    from flowcast.causal import sync

    monkeypatch.setattr(sync, "MAX_UNWAITED", 16)  # 4,096 in production: the attacker signs 4,096 hashes
    world = Causal(tmp_path, ("alpha", "beta", "gamma"), follow=False, config={"heads_every": 2.0})
    gamma = world.services["gamma"]
    gamma.subscribe(TOPIC, "inbox")
    key = world.keys["alpha"]
    ghosts = [make(key, TOPIC, b"ghost %d" % i) for i in range(16)]
    world.estates["alpha"]["manor"].send(Route("causal", "", "gamma", ""),
                                         {"topic": TOPIC, "epoch": 0, "heads": [[g.publisher, g.hash, g.hsig] for g in ghosts]},
                                         src="causal", tag="causal.heads")
    assert world.run_until(lambda: gamma.heads.counts["heads_wanted"] == 8, 10)  # its quota: half the cap, two peers
    assert gamma.heads.counts["heads_over_quota"] == 8
    honest = world.services["beta"].publish(TOPIC, b"gamma missed this one")
    world.run_for(120.0)
    assert honest.msg.hash.hex() in hashes(world.queue("gamma")), \
        f"honest head never fetched: {dict(gamma.heads.counts)}"


def test_an_announced_head_that_a_buffered_message_waits_for_is_not_given_up(tmp_path) -> None:
    """Was: Sync._on_have gives up an entry with why='head' once every source said 'none', even when a buffered
    message came to wait for it meanwhile (Sync.want found the entry and only added a source; it stays
    why='head').  Nothing ever wants it again: the message stays buffered until its epoch closes and the
    gap is not shown in causal.missing, though the doc says a dependency is asked for until then."""
    world = Causal(tmp_path, ("alpha", "beta", "gamma"), follow=False, config={"heads_every": None}, delay=0.05)
    alpha, gamma = world.services["alpha"], world.services["gamma"]
    sub = gamma.subscribe(TOPIC, "inbox")
    key = world.keys["alpha"]
    h = make(key, TOPIC, b"h")  # signed; nobody holds it yet
    m = make(key, TOPIC, b"m names h", deps=[h.id])
    world.estates["beta"]["manor"].send(Route("causal", "", "gamma", ""), {"topic": TOPIC, "epoch": 0, "heads": [[h.publisher, h.hash, h.hsig]]},
                                        src="causal", tag="causal.heads")
    assert step_until(world, lambda: h.hash in gamma.sync.missing)
    assert gamma.relay.accept(m.wire, "alpha") == "stored"  # m waits for h, which is wanted as a head
    assert step_until(world, lambda: m.hash in sub.mailbox.buffered)
    assert h.hash in gamma.sync.missing and gamma.sync.missing[h.hash].why == "dep"  # m waits for it now
    assert world.run_until(lambda: gamma.sync.missing[h.hash].tries >= 2, 10)  # beta and alpha both said none
    assert gamma.sync.counts["heads_unavailable"] == 0 and h.hash.hex() in shown(world, "gamma", "missing")
    assert alpha.relay.accept(h.wire) == "stored" and alpha.relay.accept(m.wire) == "stored"  # alpha has it now
    world.run_for(60.0)
    assert hashes(world.queue("gamma")) == [h.hash.hex(), m.hash.hex()], (
        f"m buffered: {m.hash in sub.mailbox.buffered}, waiting for h: {h.hash in sub.mailbox.waiters}; "
        f"h wanted: {h.hash in gamma.sync.missing}, shown missing: {h.hash.hex() in shown(world, 'gamma', 'missing')}")


def test_a_have_naming_a_head_twice_does_not_break_the_handler(tmp_path) -> None:
    """Was: Sync._on_have removes the answering peer from a head entry's sources for each 'none' naming it; a
    second 'none' for the same hash in one answer (entry.asked is unchanged) calls list.remove on a peer
    no longer there: ValueError out of the handler (the router logs it and counts it 'failed'), and the
    rest of the answer is not processed.  Only a hostile peer sends it."""
    world = Causal(tmp_path, ("alpha", "beta", "gamma"), follow=False, config={"heads_every": None})
    gamma = world.services["gamma"]
    real = make(world.keys["alpha"], TOPIC, b"real")
    other = make(world.keys["alpha"], TOPIC, b"other")
    for m in (real, other):
        assert gamma.sync.want_head(TOPIC, 0, m.publisher, m.hash, m.hsig, "beta") == "wanted"
        gamma.sync.missing[m.hash].asked = "beta"  # as the tick leaves it when it asks beta

    class Landing:
        src = Route("causal", "", "beta", "")
        data = {"topic": TOPIC, "msgs": [], "none": [real.hash, real.hash, other.hash]}

        def refuse(self, *a):
            raise AssertionError(a)

    gamma.sync._on_have(Landing())
    assert gamma.sync.missing[other.hash].sources == ["alpha"]  # the rest of the answer was heard
