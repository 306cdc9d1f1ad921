"""Byzantine publishers and relays against three honest estates, with the outcome the contract promises.

alpha's relay is the hostile one where a case needs a relay: it writes
straight into its own CAST cache (what it forwards), bypassing its own
predicate 1, so beta and gamma see exactly what a compromised estate can
send them.  docs/causal.md, "Predicate 1", "Equivocation", "Missing".
"""

from __future__ import annotations

import msgpack
from nacl.signing import SigningKey

from flowcast.causal.message import TopicMsgID, decode, make
from flowcast.causal.storage import causal_name
from flowcast.routing import Route
from tests.causal.kit import TOPIC, Causal, hashes

HONEST = ("beta", "gamma")


def forward_raw(world: Causal, name: str, wire: bytes, publisher: bytes = bytes(32)) -> None:
    """``name``'s relay forwards ``wire`` as is: into its cache, where its peers' subscriptions read it."""
    world.services[name].storage.publisher.publish(causal_name(name, TOPIC), wire, publisher=publisher.hex())


def stored_wires(world: Causal, name: str) -> set[bytes]:
    return {wire for _seq, wire in world.services[name].storage.scan(TOPIC)}


def subscribed(world: Causal) -> None:
    for n in world.names:
        world.services[n].subscribe(TOPIC, "inbox")


def test_a_forged_signature_is_never_stored_forwarded_delivered_or_kept(tmp_path) -> None:
    world = Causal(tmp_path)
    subscribed(world)
    alpha_key = world.keys["alpha"]
    good = make(alpha_key, TOPIC, b"real")
    forged = decode(good.wire)
    # the body of a real message, another signature: the publisher is alpha's key, the signer is not
    other = SigningKey(b"m" * 32).sign(b"flowcast/causal/id/v1\x00" + forged.hash).signature
    forged_wire = msgpack.packb([forged.body, [], other], use_bin_type=True)
    assert decode(forged_wire).hash == good.hash  # the same id, claimed
    forward_raw(world, "alpha", forged_wire, bytes(alpha_key.verify_key))
    assert world.run_until(lambda: all(world.services[n].relay.counts["dropped_bad_signature"] == 1 for n in HONEST), 20)
    honest = world.services["beta"].publish(TOPIC, b"after the forgery")
    assert world.run_until(lambda: all(len(world.queue(n).queue) == 1 for n in world.names), 20)
    for n in HONEST:
        assert forged_wire not in stored_wires(world, n)  # so not forwarded: nobody's peers can read it
        assert hashes(world.queue(n)) == [honest.msg.hash.hex()]
        assert world.services[n].ledger.evidence(TOPIC) == []  # a forgery proves nothing about alpha
        assert good.hash not in world.services[n].relay.index and good.hash not in world.services[n].relay.rejected
    # the forgery did not poison the id: the real message, when it comes, is accepted everywhere
    assert world.services["alpha"].relay.accept(good.wire) == "stored"
    assert world.run_until(lambda: all(good.hash.hex() in hashes(world.queue(n)) for n in world.names), 20)


def test_a_key_that_is_not_a_publisher_of_the_topic_is_stopped_at_the_first_relay(tmp_path) -> None:
    world = Causal(tmp_path, publishers=("alpha", "beta", "gamma"))
    subscribed(world)
    mallory = SigningKey(b"M" * 32)
    spam = [make(mallory, TOPIC, b"buy now %d" % i) for i in range(50)]
    for msg in spam:
        forward_raw(world, "alpha", msg.wire, bytes(mallory.verify_key))
    assert world.run_until(lambda: all(world.services[n].relay.counts["dropped_not_publisher"] == 50 for n in HONEST), 20)
    world.run_for(1.0)
    for n in HONEST:  # not amplified: beta never passed them on to gamma, nor gamma to beta
        assert stored_wires(world, n) == set() and len(world.queue(n).queue) == 0
        assert world.services[n].relay.counts["stored"] == 0


def test_junk_from_a_hostile_relay_is_counted_and_delivery_goes_on(tmp_path) -> None:
    world = Causal(tmp_path)
    subscribed(world)
    good = make(world.keys["alpha"], TOPIC, b"ok")
    for junk in (b"", b"\x93", b"\xc1" * 100, good.wire + b"\x00", good.wire[:-1], b"\x00" * 1000):
        forward_raw(world, "alpha", junk)
    forward_raw(world, "alpha", good.wire, bytes(world.keys["alpha"].verify_key))
    assert world.run_until(lambda: all(hashes(world.queue(n)) == [good.hash.hex()] for n in HONEST), 20)
    for n in HONEST:
        assert world.services[n].relay.counts["dropped_malformed"] == 6


def test_a_replayed_message_is_a_duplicate_by_any_path_and_after_a_restart(tmp_path) -> None:
    world = Causal(tmp_path)
    subscribed(world)
    first = world.services["alpha"].publish(TOPIC, b"once")
    assert world.run_until(lambda: all(len(world.queue(n).queue) == 1 for n in world.names), 20)
    beta = world.services["beta"]
    for _ in range(5):
        assert beta.relay.accept(first.msg.wire, "gamma") == "duplicate"
    forward_raw(world, "alpha", first.msg.wire, first.msg.publisher)  # the hostile relay replays it into the stream
    world.stop("beta")
    beta = world.start("beta")
    beta.subscribe(TOPIC, "inbox")
    assert beta.relay.accept(first.msg.wire, "alpha") == "duplicate"
    world.run_for(3.0)
    for n in world.names:
        assert hashes(world.queue(n)) == [first.msg.hash.hex()]
    assert len([w for w in stored_wires(world, "gamma") if w == first.msg.wire]) == 1


def test_an_equivocation_is_detected_everywhere_kept_as_proof_and_both_are_delivered(tmp_path) -> None:
    world = Causal(tmp_path)
    subscribed(world)
    alpha = world.services["alpha"]
    root = alpha.publish(TOPIC, b"root")
    assert world.run_until(lambda: root.done, 10)
    key = world.keys["alpha"]
    left = make(key, TOPIC, b"I pay bob", deps=[root.msg.id])
    right = make(key, TOPIC, b"I pay carol", deps=[root.msg.id])  # the same own previous: two histories
    forward_raw(world, "alpha", left.wire, left.publisher)
    forward_raw(world, "alpha", right.wire, right.publisher)
    assert world.run_until(lambda: all(len(world.queue(n).queue) == 3 for n in HONEST), 20)
    for n in HONEST:
        service = world.services[n]
        assert service.relay.counts["equivocations"] == 1
        shown = world.estates[n].store("manor").share("causal.equivocations")[TOPIC]
        assert shown == {right.hash.hex(): {"publisher": key.verify_key.encode().hex(), "other": left.hash.hex()}}
        kept = {(e["hash"], e["kind"]): e for e in service.ledger.evidence(TOPIC)}
        assert kept[(right.hash, "equivocation")]["wire"] == right.wire and kept[(right.hash, "equivocation")]["other"] == left.hash
        assert kept[(left.hash, "equivocation")]["wire"] == left.wire  # both halves of the proof
        assert set(hashes(world.queue(n))) == {root.msg.hash.hex(), left.hash.hex(), right.hash.hex()}
        assert hashes(world.queue(n))[0] == root.msg.hash.hex()


def test_a_dependency_that_never_existed_is_missing_visibly_until_its_epoch_closes_then_abandoned(tmp_path) -> None:
    world = Causal(tmp_path, config={"grace": 30.0})
    subscribed(world)
    key = world.keys["alpha"]
    ghost = make(key, TOPIC, b"signed, never sent")
    orphan = make(world.keys["alpha"], TOPIC, b"names the ghost", deps=[ghost.id])
    forward_raw(world, "alpha", orphan.wire, orphan.publisher)
    missing = world.estates["gamma"].store("manor").share("causal.missing")
    assert world.run_until(lambda: ghost.hash.hex() in (missing.get(TOPIC) or {}), 20)
    world.run_for(20.0)
    assert missing[TOPIC][ghost.hash.hex()]["tries"] >= 3 and len(world.queue("gamma").queue) == 0
    genesis = world.services["alpha"].genesis(TOPIC)  # the owner moves on; the old epoch closes after grace
    assert world.run_until(lambda: genesis.done, 10)
    abandoned = world.estates["gamma"].store("manor").share("causal.abandoned")
    assert world.run_until(lambda: orphan.hash.hex() in (abandoned.get(TOPIC) or {}), 60)
    assert abandoned[TOPIC][orphan.hash.hex()]["missing"] == [ghost.hash.hex()]
    assert missing[TOPIC] == {} and len(world.queue("gamma").queue) == 1  # only the genesis was delivered
    assert world.queue("gamma").queue[0]["tags"] == ["epoch"]


def test_a_flood_of_valid_messages_naming_ghosts_is_bounded_and_honest_traffic_flows(tmp_path, monkeypatch) -> None:
    from flowcast.causal import sync

    monkeypatch.setattr(sync, "MAX_UNWAITED", 50)
    world = Causal(tmp_path, config={"max_per_publisher": 20, "max_buffered": 100})
    subscribed(world)
    key = world.keys["alpha"]
    for i in range(300):  # each names its own ghost: 300 gaps nobody can fill
        ghost = make(key, TOPIC, b"ghost %d" % i)
        forward_raw(world, "alpha", make(key, TOPIC, b"flood %d" % i, deps=[ghost.id]).wire, bytes(key.verify_key))
    assert world.run_until(lambda: world.services["gamma"].relay.counts["stored"] == 300, 30)
    honest = [world.services["beta"].publish(TOPIC, b"beta %d" % i, deps=[]) for i in range(10)]
    assert world.run_until(lambda: len(world.queue("gamma").queue) == 10, 30)
    gamma = world.services["gamma"]
    box = gamma.broker.subs["log>inbox"].mailbox
    assert len(box.buffered) <= 20 and box.per_publisher[bytes(key.verify_key)] <= 20  # the cap, not 300
    # what the buffered ones wait for, and (capped) what the deferred ones name: fetched, not remembered without bound
    assert len(gamma.sync.missing) <= 20 + 50 and gamma.sync.counts["unwaited_over_cap"] > 0
    assert hashes(world.queue("gamma")) == [h.msg.hash.hex() for h in honest]
    assert len(box.deferred) == 300 - 20  # the rest stays in storage, each remembered by its seq


def test_a_forged_answer_to_a_fetch_is_refused(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "gamma"), follow=False)
    gamma = world.services["gamma"]
    gamma.subscribe(TOPIC, "inbox")
    first = make(world.keys["alpha"], TOPIC, b"first")
    second = make(world.keys["alpha"], TOPIC, b"second", deps=[first.id])
    assert world.services["alpha"].relay.accept(first.wire) == "stored"
    # an unasked answer carrying the first message's body under someone else's signature
    fake = make(SigningKey(b"x" * 32), TOPIC, b"first")
    body = decode(first.wire).body
    stolen = msgpack.packb([body, [], decode(fake.wire).hsig], use_bin_type=True)
    world.estates["alpha"]["manor"].send(Route("causal", "", "gamma", ""), {"topic": TOPIC, "msgs": [stolen], "none": []},
                                         src="causal", tag="causal.have")
    assert world.run_until(lambda: gamma.relay.counts["dropped_bad_signature"] == 1, 10)
    assert first.hash not in gamma.relay.index  # the forgery did not take the id
    assert gamma.relay.accept(second.wire, "alpha") == "stored"  # which now waits for first: fetched from alpha
    assert world.run_until(lambda: len(world.queue("gamma").queue) == 2, 20)  # the real one is fetched from alpha
    assert hashes(world.queue("gamma")) == [first.hash.hex(), second.hash.hex()]


def test_a_publisher_of_one_topic_is_not_a_publisher_of_another() -> None:
    from flowcast.causal.config import CausalConfig, TopicConfig
    from flowcast.causal.relay import Relay

    class Storage:
        def __init__(self) -> None:
            self.put_msgs = []

        def put(self, msg):
            self.put_msgs.append(msg)
            return type("Ticket", (), {"add_done": lambda self, fn: None})()

    anna, ben = SigningKey(b"a" * 32), SigningKey(b"b" * 32)
    config = CausalConfig(topics={"one": TopicConfig.of("one", bytes(anna.verify_key)), "two": TopicConfig.of("two", bytes(ben.verify_key))})
    drops = []
    storage = Storage()
    relay = Relay(storage, config, lambda: 0.0, lambda *a: None, lambda *a: drops.append(a[1]), lambda *a: None, lambda *a: None)
    assert relay.accept(make(anna, "two", b"x").wire) == "not_publisher"
    assert relay.accept(make(ben, "one", b"x").wire) == "not_publisher"
    assert relay.accept(make(anna, "one", b"x").wire) == "stored"
    assert drops == ["not_publisher", "not_publisher"] and len(storage.put_msgs) == 1
    kept = storage.put_msgs[0]
    assert kept.publisher is relay._keys[bytes(anna.verify_key)] and kept.topic is config.topics["one"].name  # one copy each


def test_a_forged_reference_to_a_real_message_does_not_censor_it(tmp_path) -> None:
    """Was: alpha (a valid publisher) names beta's real message m with a bad hsig.  gamma's sync marks
    m's *hash* rejected in relay.rejected, so when the real, correctly signed m arrives it is dropped
    as a 'duplicate' and never stored, forwarded or delivered; beta's later messages are dep_rejected."""
    world = Causal(tmp_path, ("alpha", "beta", "gamma"), follow=False, config={"heads_every": None})
    gamma = world.services["gamma"]
    gamma.subscribe(TOPIC, "inbox")
    m = make(world.keys["beta"], TOPIC, b"beta's real message")
    later = make(world.keys["beta"], TOPIC, b"beta's next", deps=[m.id])
    forged_ref = TopicMsgID(m.publisher, m.hash, bytes(64))
    attack = make(world.keys["alpha"], TOPIC, b"front-runs m", deps=[forged_ref])
    assert gamma.relay.accept(attack.wire, "alpha") == "stored"
    world.run_for(1.0)
    assert gamma.relay.accept(m.wire, "beta") == "stored", "the real, correctly signed message was refused"
    assert gamma.relay.accept(later.wire, "beta") == "stored"
    assert world.run_until(lambda: len(world.queue("gamma").queue) == 2, 20)
    assert hashes(world.queue("gamma")) == [m.hash.hex(), later.hash.hex()]


def test_fake_geneses_of_far_epochs_are_dropped_without_filling_the_evidence(tmp_path) -> None:
    """Was: A non-owner tags messages 'epoch' with ever-new future epochs: the window lets any 'genesis' of a
    future epoch through before the owner check, and the evidence cap is per (publisher, kind, epoch),
    so each is written to the ledger and kept in relay.rejected / service._evidence for ever."""
    world = Causal(tmp_path, ("alpha", "beta"), follow=False, config={"evidence_cap": 5, "heads_every": None})
    beta = world.services["beta"]
    mallory = world.keys["beta"]  # a valid publisher, not the owner
    outcomes = set()
    for i in range(200):
        fake = make(mallory, TOPIC, b"%d" % i, epoch=10 + i, tags=["epoch"])
        outcomes.add(beta.relay.accept(fake.wire, "alpha"))
    world.run_for(1.0)
    written = len(beta.ledger.evidence(TOPIC, limit=10_000))
    assert written <= 5, f"evidence rows written: {written} (cap 5); outcomes {outcomes}"
    assert len(beta.relay.rejected) <= 5 and len(beta._evidence) <= 5


def test_an_honest_publish_names_what_was_delivered_not_a_hostile_undeliverable_head(tmp_path) -> None:
    """Was: A valid publisher (alpha) publishes ONE message naming a signed ghost as its own previous.
    It is stored and forwarded everywhere and becomes a relay head; beta's next publish (deps=None,
    the documented default) names it, so beta's honest message waits for the ghost everywhere."""
    world = Causal(tmp_path)
    for n in world.names:
        world.services[n].subscribe(TOPIC, "inbox")
    key = world.keys["alpha"]
    ghost = make(key, TOPIC, b"signed, never sent")
    poison = make(key, TOPIC, b"names a ghost", deps=[ghost.id])
    assert world.services["alpha"].relay.accept(poison.wire) == "stored"
    assert world.run_until(lambda: all(poison.hash in world.services[n].relay.index for n in world.names), 20)
    honest = world.services["beta"].publish(TOPIC, b"an honest message")
    world.run_for(60.0)
    named = poison.hash in {d.hash for d in honest.msg.deps}
    for n in ("beta", "gamma"):
        assert honest.msg.hash.hex() in hashes(world.queue(n)), f"not delivered at {n}; names the poison: {named}"


def test_a_forged_reference_is_rejected_whether_or_not_its_dep_is_already_wanted(tmp_path) -> None:
    """Was: A message naming a real id with a bad hsig is rejected by Sync.want (dep not held) or by the relay's
    _held_refs (dep held) -- but not when the dep is already in Sync.missing: want() finds the entry and
    'continue's before the verify.  Then the message is delivered once the dep arrives.  Whether a
    message is delivered depends on arrival order, so estates disagree."""
    world = Causal(tmp_path, ("alpha", "beta", "gamma"), follow=False, config={"heads_every": None})
    beta, gamma = world.services["beta"], world.services["gamma"]
    for n in ("beta", "gamma"):
        world.services[n].subscribe(TOPIC, "inbox")
    d = make(world.keys["alpha"], TOPIC, b"d")
    honest = make(world.keys["alpha"], TOPIC, b"names d", deps=[d.id])
    forged = make(world.keys["beta"], TOPIC, b"names d with a bad hsig", deps=[TopicMsgID(d.publisher, d.hash, bytes(64))])
    # gamma: an honest message makes d wanted (nobody has it yet), then the forged reference arrives, then d
    assert gamma.relay.accept(honest.wire, "alpha") == "stored"
    world.run_for(0.5)
    assert d.hash in gamma.sync.missing
    assert gamma.relay.accept(forged.wire, "alpha") == "stored"
    world.run_for(0.5)
    # beta: d first, then the forged reference -> rejected at the relay (_held_refs)
    assert beta.relay.accept(d.wire, "alpha") == "stored"
    world.run_for(0.5)
    assert beta.relay.accept(forged.wire, "alpha") == "bad_dep_signature"
    assert world.run_until(lambda: honest.hash.hex() in hashes(world.queue("gamma")), 10)  # d fetched from beta
    world.run_for(1.0)
    assert forged.hash.hex() not in hashes(world.queue("gamma")), "delivered at gamma, rejected at beta"
