"""What a causal subscription handed to its flow stays owed in the ledger until the flow acknowledges it.

Deterministic, on the simulated network: a relay stopped without its flow
having acknowledged what it was given (and its in-memory queue gone, as a
killed house's is) hands exactly that over again when it starts, in the
order first delivered, flagged ``redelivered``, before anything new.  The
kill -9 tests with real processes are tests/causal/test_kill9.py.
"""

from __future__ import annotations

from tests.causal.kit import TOPIC, Causal


def _restart(world: Causal, ack: str = "turn"):
    """beta's house dies: nothing more acknowledged, its queue share's memory gone; then it starts again."""
    world.stop("beta", taken=False)
    world.queue("beta").queue.clear()
    return world.start("beta").subscribe(TOPIC, "inbox", ack=ack)


def test_what_the_flow_had_not_taken_is_handed_over_again_first_in_order_flagged(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "beta"))
    alpha, beta = world.services["alpha"], world.services["beta"]
    beta.subscribe(TOPIC, "inbox")
    sent = [alpha.publish(TOPIC, b"m%d" % i) for i in range(10)]
    queue = world.queue("beta")
    assert world.run_until(lambda: len(queue.queue) == 10, 20)
    taken = [queue.queue.popleft() for _ in range(4)]
    world.estates["beta"].store("manor").end_turn()  # the turn that took them ended: acknowledged
    assert not any(item["redelivered"] for item in taken)
    sub = _restart(world)
    more = [alpha.publish(TOPIC, b"n%d" % i) for i in range(3)]
    assert world.run_until(lambda: len(queue.queue) == 9, 20)
    items = list(queue.queue)
    assert [i["hash"] for i in items] == [p.msg.hash.hex() for p in sent[4:] + more]
    assert [i["redelivered"] for i in items] == [True] * 6 + [False] * 3
    assert sub.redelivered == 6 and sub.mailbox.counts["duplicate"] == 0
    world.run_for(2.0)
    assert len(queue.queue) == 9  # nothing else, and nothing twice


def test_an_explicit_subscription_owes_what_was_taken_until_acked(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "beta"))
    alpha, beta = world.services["alpha"], world.services["beta"]
    beta.subscribe(TOPIC, "inbox", ack="explicit")
    sent = [alpha.publish(TOPIC, b"m%d" % i) for i in range(8)]
    queue = world.queue("beta")
    assert world.run_until(lambda: len(queue.queue) == 8, 20)
    taken = list(queue.queue)
    queue.queue.clear()
    store = world.estates["beta"].store("manor")
    store.end_turn()  # taken is not enough
    assert all(beta.ack(item) for item in (taken[0], taken[1], taken[5]))
    assert not beta.ack({"sub": "nobody", "hash": taken[2]["hash"]}) and not beta.ack("junk")
    store.end_turn()
    _restart(world, "explicit")
    assert world.run_until(lambda: len(queue.queue) == 5, 20)
    assert [i["hash"] for i in queue.queue] == [sent[n].msg.hash.hex() for n in (2, 3, 4, 6, 7)]
    assert all(i["redelivered"] for i in queue.queue)


def test_an_owed_message_the_cache_expired_is_reported_abandoned(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "beta"), config={"heads_every": None})
    alpha, beta = world.services["alpha"], world.services["beta"]
    world.caches["beta"].retention = 50.0
    beta.subscribe(TOPIC, "inbox")
    first = alpha.publish(TOPIC, b"owed for too long")
    queue = world.queue("beta")
    assert world.run_until(lambda: len(queue.queue) == 1, 20)
    world.run_for(120.0)  # past the retention, while the flow has not taken it
    expired = world.caches["beta"].expire()
    assert world.run_until(lambda: expired.done, 5) and beta.storage.get([beta.relay.index[first.msg.hash].seq]) == {}
    world.stop("beta", taken=False)
    queue.queue.clear()
    beta = world.start("beta")
    sub = beta.subscribe(TOPIC, "inbox")
    assert not queue.queue and sub.redelivered == 0
    assert beta.broker.counts["expired_while_owed"] == 1
    shown = world.estates["beta"].store("manor").share("causal.abandoned").get(TOPIC) or {}
    assert shown[first.msg.hash.hex()]["reason"] == "expired_while_owed"
