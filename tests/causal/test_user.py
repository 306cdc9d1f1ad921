"""The causal layer as a user meets it: flows, the Python API, restarts (from an outside review).

Each docstring says what went wrong before its fix ("Was:"); all run on virtual time (the simulated
network of tests/causal/kit.py and flowkit.py), none sleeps.
"""

from __future__ import annotations

from pathlib import Path

from flowcast.causal.behaviours import dep_ids
from tests.causal.flowkit import FlowCausal
from tests.causal.kit import TOPIC, Causal, hashes

# A flow whose delivery queue holds only two items (the stock default is 10,000: the same
# thing happens to any flow that falls 10,000 deliveries behind, e.g. catching up after a restart).
BOUNDED = """house {name}
init ctl with held true
framer log be active first held
  frame held
    do queue to outbox at enter
    do queue to acks at enter
    do queue to got with bound 2 at enter
    do causal publish from outbox to acks with topic "log"
    do causal subscribe to got with topic "log"
    go dropped if not held in ctl
  frame dropped
    go held if held in ctl
"""


def bounded(tmp_path: Path) -> FlowCausal:
    return FlowCausal(tmp_path, {n: BOUNDED.format(name=n) for n in ("alpha", "beta")})


def contents(w: FlowCausal, n: str) -> list[bytes]:
    return [d["content"] for d in w.store(n).queue("got").queue]


def test_a_full_delivery_queue_holds_deliveries_until_there_is_room(tmp_path):
    """Was: Broker._push (broker.py:338) puts a delivery the full queue refused into ``sub.backlog``, and every
    later one behind it; Broker.drain_backlogs (broker.py:342) would move them on, but nothing ever calls
    it.  So once the flow's queue was full, nothing more reaches the flow even after it took everything,
    while the ledger says delivered and status() counts them delivered."""
    w = bounded(tmp_path)
    outbox = w.store("alpha").queue("outbox")
    for i in range(4):
        outbox.push(f"m{i}")
    got = w.store("beta").queue("got")
    assert w.run_until(lambda: len(got.queue) == 2, 30)
    w.run_until(lambda: False, 2)
    taken = [got.queue.popleft()["content"] for _ in range(2)]  # the flow takes what it was given
    assert w.run_until(lambda: len(got.queue) == 2, 30), (
        f"after taking {taken}, nothing more arrives: {w.services['beta'].status()['subscriptions']}")
    assert taken + contents(w, "beta") == [b"m0", b"m1", b"m2", b"m3"]


def test_deliveries_not_handed_over_when_the_frame_is_left_come_on_re_entry(tmp_path):
    """Was: Broker.flush commits a delivery to the ledger first (broker.py:280), then _push drops it when the
    subscription has closed meanwhile (broker.py:335) -- and unsubscribe throws ``sub.backlog`` away.  A
    frame left with deliveries still owed (a backlog, or ones released in the same turn) loses them:
    the re-entered subscription loads the ledger, which says they were delivered."""
    w = bounded(tmp_path)
    outbox = w.store("alpha").queue("outbox")
    for i in range(4):
        outbox.push(f"m{i}")
    beta = w.services["beta"]
    assert w.run_until(lambda: len(beta.relay.index) == 4 and len(contents(w, "beta")) == 2, 30)
    w.run_until(lambda: False, 1)
    w.store("beta").share("ctl")["held"] = False  # the frame is left
    assert w.run_until(lambda: not beta.broker.subs, 10)
    got = w.store("beta").queue("got")
    seen = [got.queue.popleft()["content"] for _ in range(2)]
    w.store("beta").share("ctl")["held"] = True  # and entered again, with room in the queue
    assert w.run_until(lambda: len(beta.broker.subs) == 1, 10)
    w.run_until(lambda: len(got.queue) == 2, 10)
    assert seen + contents(w, "beta") == [b"m0", b"m1", b"m2", b"m3"], "m2 and m3 were never handed to the flow"


REPLY = """house {name}
framer log be active first run
  frame run
    do queue to outbox at enter
    do queue to acks at enter
    do queue to got at enter
    do causal publish from outbox to acks with topic "log"
    do causal subscribe to got with topic "log"
"""


def test_a_reply_to_the_previous_epoch_is_refused_to_the_flow_not_acked(tmp_path):
    """Was: dep_ids (behaviours.py:102) checks a dep's topic but not its epoch, and CausalService.publish
    (service.py:129) signs whatever it is given, so a reply naming a delivery of the epoch before is
    stored, forwarded and *acknowledged*; every mailbox then rejects it (cross_epoch).  Worse, it became
    the publisher's chain tip (relay.tips), so each later message of that publisher in the epoch names
    it as prev and is rejected too (dep_rejected) -- all acknowledged, none delivered anywhere.  The
    contract: deps never cross epochs; a refusal comes back to the flow in SOURCE.error."""
    w = FlowCausal(tmp_path, {n: REPLY.format(name=n) for n in ("alpha", "beta")})
    alpha, beta = w.services["alpha"], w.services["beta"]
    w.store("alpha").queue("outbox").push("a question")
    got = w.store("beta").queue("got")
    assert w.run_until(lambda: len(got.queue) == 1, 30)
    question = got.queue[0]
    opened = alpha.genesis(TOPIC)  # the owner opens epoch 1 (epoch_every does the same on its own)
    assert w.run_until(lambda: opened.done and beta.relay.current[TOPIC] == 1 and len(got.queue) == 2, 30)
    outbox = w.store("beta").queue("outbox")
    outbox.push({"content": "the answer", "deps": [question]})
    outbox.push("beta goes on talking")
    acks, errors = w.store("beta").queue("acks"), w.store("beta").queue("outbox.error")
    assert w.run_until(lambda: len(acks.queue) + len(errors.queue) == 2, 30)
    w.run_until(lambda: False, 3)
    at_alpha = [d["content"] for d in w.store("alpha").queue("got").queue]
    assert b"beta goes on talking" in at_alpha, (
        f"alpha got {at_alpha}; beta's flow heard acks={len(acks.queue)} errors={[e['reason'] for e in errors.queue]};"
        f" alpha rejected {sorted(v['reason'] for v in w.store('alpha').share('causal.rejected').fields().get('log', {}).values())}")


def test_closing_an_old_subscription_handle_again_leaves_the_live_one(tmp_path):
    """Was: Broker.unsubscribe (broker.py:126) pops ``subs[sub.name]`` before checking it is ``sub``: closing a
    stale handle again removes the *new* subscription of that name from ``subs`` (it stays in by_topic and
    keeps delivering), so the name is free and a third subscribe delivers the same messages again."""
    world = Causal(tmp_path, ("alpha", "beta"), config={"heads_every": None})
    alpha, beta = world.services["alpha"], world.services["beta"]
    old = beta.subscribe(TOPIC, "inbox")
    old.close()
    beta.subscribe(TOPIC, "inbox")
    old.close()  # closing is expected to be idempotent
    try:
        beta.subscribe(TOPIC, "inbox")  # the name is in use: this should be refused
    except ValueError:
        pass
    m = alpha.publish(TOPIC, b"once")
    world.run_for(3)
    assert hashes(world.queue("beta")).count(m.msg.hash.hex()) == 1, (
        f"delivered twice; status lists {[s['name'] for s in beta.status()['subscriptions']]}")


def test_a_predicate_verdict_that_cannot_be_shown_refuses_only_there(tmp_path):
    """Was: Broker._judge turns a verdict into a reason with ``str(verdict)`` (broker.py:251), outside its try:
    a verdict whose str() raises propagates out of Broker.stored (broker.py:156), which the CAST cache's
    callback wrapper swallows into a log line.  The message is then offered to no later subscription
    either -- not one without a predicate -- nothing is counted or shown, and a message naming it
    waits for ever, since the relay holds it and so never fetches it."""

    class Odd:
        def __str__(self):
            raise RuntimeError("cannot be shown")

    world = Causal(tmp_path, ("alpha", "beta"), config={"heads_every": None})
    alpha, beta = world.services["alpha"], world.services["beta"]
    odd = beta.subscribe(TOPIC, "odd", predicate=lambda msg: Odd())
    plain = beta.subscribe(TOPIC, "plain")
    m = alpha.publish(TOPIC, b"hello")
    assert world.run_until(lambda: m.msg.hash in beta.relay.index, 10)
    world.run_for(2)
    assert plain.delivered == 1, f"plain delivered {plain.delivered}; odd rejected {odd.rejected}; counts {beta.status()['counts']}"


def test_re_judging_a_message_on_re_entry_does_not_use_up_the_evidence_cap(tmp_path):
    """Was: CausalService.keep_evidence counts every call against the cap (service.py:222), and a subscription
    re-judges every stored message whenever it is made (a frame re-entered, a restart, or a second
    subscription with a predicate).  One bad message judged 100 times fills its publisher's cap for the
    epoch, so its next, different bad message is not kept as evidence ("written at most 100 times
    per publisher, kind and epoch" means 100 messages, not 100 re-judgements of one)."""
    world = Causal(tmp_path, ("alpha", "beta"), config={"heads_every": None})
    alpha, beta = world.services["alpha"], world.services["beta"]

    def valid(msg):
        return b"bad" not in msg.content or "bad"

    first = alpha.publish(TOPIC, b"bad 1")
    world.run_for(2)
    for _ in range(100):  # a frame with 'causal subscribe ... valid' entered and left 100 times
        beta.subscribe(TOPIC, "inbox", predicate=valid).close()
    beta.subscribe(TOPIC, "inbox", predicate=valid)
    second = alpha.publish(TOPIC, b"bad 2")
    world.run_for(2)
    kept = {e["hash"] for e in beta.ledger.evidence(TOPIC)}
    assert first.msg.hash in kept
    assert second.msg.hash in kept, f"the second bad message was not kept: {dict(beta.counts)}"


def test_a_publish_in_flight_when_the_estate_stops_is_delivered_after_the_restart(tmp_path):
    """Was: CausalService.close (service.py) leaves the relay wired to the cache: closing the cache completes
    the pending write, Relay._stored -> Broker.stored offers it to the closed broker, which schedules a
    flush; that flush reads the closed cache and raises CallbackError out of the scheduler (a house
    running its scheduler on would die).  A stop with a publish in flight is an ordinary restart."""
    world = Causal(tmp_path, ("alpha", "beta"), config={"heads_every": None})
    beta = world.services["beta"]
    beta.subscribe(TOPIC, "inbox")
    pending = beta.publish(TOPIC, b"said just before the house stops")
    assert not pending.done
    world.stop("beta")
    world.start("beta").subscribe(TOPIC, "inbox")
    world.run_for(2)  # raised: CallbackError: timer callback Broker.flush failed: CacheError('the CAST cache is closed')
    assert hashes(world.queue("beta")).count(pending.msg.hash.hex()) == 1


def test_the_reserved_epoch_tag_is_refused_not_kept_as_evidence_against_oneself(tmp_path):
    """Was: make()/check_tag (message.py:173) accept the reserved tag ``epoch``, and so does 'causal publish ...
    tags "epoch"' at load.  The estate then signs a message its own relay judges a bad genesis
    (rule 6): it is refused as ``bad_genesis`` and kept in the estate's own ledger as evidence that
    its own key misbehaved.  A publish should refuse the reserved tag before signing (bad_tag)."""
    world = Causal(tmp_path, ("alpha", "beta"), config={"heads_every": None})
    beta = world.services["beta"]
    attempt = None
    try:
        attempt = beta.publish(TOPIC, b"tagged by a user", tags=["epoch"])
    except Exception as error:  # noqa: BLE001 - refused before signing: what the test asks for
        assert getattr(error, "reason", "") == "bad_tag"
    world.run_for(1)
    assert beta.ledger.evidence(TOPIC) == [], (
        f"beta keeps evidence against itself ({attempt.error if attempt else None})")


def test_dep_ids_names_only_deps_of_the_current_epoch(tmp_path):
    """The unit-sized form of the cross-epoch finding: dep_ids (behaviours.py:102) returns an id of a
    closing epoch for a publish in the current one instead of refusing it (reason cross_epoch)."""
    world = Causal(tmp_path, ("alpha", "beta"), config={"heads_every": None})
    alpha, beta = world.services["alpha"], world.services["beta"]
    old = alpha.publish(TOPIC, b"epoch 0")
    assert world.run_until(lambda: old.msg.hash in beta.relay.index, 10)
    opened = alpha.genesis(TOPIC)
    assert world.run_until(lambda: opened.done and beta.relay.current[TOPIC] == 1, 10)
    try:
        named = dep_ids(beta, TOPIC, [old.msg.hash.hex()])
    except Exception as error:  # noqa: BLE001
        assert getattr(error, "reason", "") in ("cross_epoch", "unknown_dep")
    else:
        raise AssertionError(f"dep_ids named {named} of epoch 0 for a message of epoch 1")



def test_odd_tags_and_deps_in_an_item_come_back_to_the_flow_with_a_reason_of_the_contract(tmp_path):
    """Was: {"tags": None} or {"deps": 5} came back with the reason 'TypeError'."""
    from tests.causal.test_behaviours import world

    w = world(tmp_path, names=("alpha", "beta"))
    outbox = w.store("alpha").queue("outbox")
    for item in ({"content": "a", "tags": 5}, {"content": "b", "deps": 5}, {"content": "c", "tags": ["epoch"]},
                 {"content": "d", "tags": None}):
        outbox.push(item)
    errors = w.store("alpha").queue("outbox.error")
    assert w.run_until(lambda: len(errors.queue) == 3, 10)
    assert [e["reason"] for e in errors.queue] == ["bad_tag", "bad_dep", "bad_tag"]
    acks = w.store("alpha").queue("acks")
    assert w.run_until(lambda: len(acks.queue) == 1, 10)  # tags None: the act's own tags
