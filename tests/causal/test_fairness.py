"""A flood from one authorized publisher cannot stall another topic, nor another publisher of its topic.

Issue 25, finding 9: 100,000 messages with missing deps from one publisher
took another topic's latency at the subscriber from 43 ms to 11.2 s (one
queue per peer for every topic, drained in arrival order), and honest
messages on the flooded topic waited 135 s; past 4,096 missing deps each
delivery made the broker rescan the relay index and re-read every deferred
message of the flooding publisher.  Time on the virtual clock does not
show CPU spent, so these tests count the work instead: the order in which
the relay takes what a feed brought, and the stored messages read back.
"""

from __future__ import annotations

from flowcast.causal.message import make
from flowcast.causal.storage import causal_name
from flowcast.causal.sync import from_share
from tests.causal.kit import TOPIC, Causal

FLOOD = 600


def _item(peer: str, msg, seq: int) -> dict:
    """What alpha's CAST feed hands beta for one stored message."""
    return {"tag": "cast", "name": causal_name(peer, msg.topic), "publisher": msg.publisher.hex(), "data": msg.wire, "seq": seq}


def _burst(world: Causal, items: list[dict]) -> list[bytes]:
    """Hand beta's feed from alpha ``items`` in one go, as a CAST batch does; the hashes in the order beta's relay took them."""
    beta = world.services["beta"]
    taken: list[bytes] = []
    beta.hooks.add("stored", lambda topic, msg, seq, source: taken.append(msg.hash))
    share = world.estates["beta"].store("manor").queue(from_share("alpha"))
    share.queue.extend(items[:-1])
    share.push(items[-1])
    assert world.run_until(lambda: len(taken) == len(items), 30)
    return taken


def _flood(world: Causal) -> list:
    key = world.keys["alpha"]
    return [make(key, TOPIC, b"flood %d" % i, deps=[make(key, TOPIC, b"ghost %d" % i).id]) for i in range(FLOOD)]


def test_a_flood_on_one_topic_does_not_hold_up_another_topic_from_the_same_peer(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "beta"), topics=("other",), config={"heads_every": None})
    flood = _flood(world)
    honest = make(world.keys["alpha"], "other", b"another topic, the same publisher")
    items = [_item("alpha", m, n) for n, m in enumerate(flood)] + [_item("alpha", honest, FLOOD)]
    taken = _burst(world, items)
    assert taken.index(honest.hash) <= 2, f"taken after {taken.index(honest.hash)} flood messages"
    assert world.services["beta"].status()["intake"]["passes"] >= FLOOD // 64  # in turns, not in one go


def test_a_flood_by_one_publisher_does_not_hold_up_another_publisher_of_the_topic(tmp_path) -> None:
    world = Causal(tmp_path, ("alpha", "beta"), config={"heads_every": None})
    flood = _flood(world)
    honest = make(world.keys["beta"], TOPIC, b"an honest message behind the flood")
    items = [_item("alpha", m, n) for n, m in enumerate(flood)] + [_item("alpha", honest, FLOOD)]
    taken = _burst(world, items)
    assert taken.index(honest.hash) <= 2, f"taken after {taken.index(honest.hash)} flood messages"


def test_past_4096_deferred_deps_an_honest_delivery_rereads_nothing_of_the_flood(tmp_path, monkeypatch) -> None:
    """Was: a publisher whose deferred messages named more than 4,096 distinct deps was re-read in full (a scan
    of the relay index and a read-back of each of its deferred messages) after any delivery, once a second."""
    from flowcast.causal import broker as broker_mod

    world = Causal(tmp_path, ("alpha", "beta"), follow=False,
                   config={"max_per_publisher": 10, "max_buffered": 50, "heads_every": None})
    beta = world.services["beta"]
    beta.subscribe(TOPIC, "inbox")
    key = world.keys["alpha"]
    n = 4200
    for i in range(n):
        wire = make(key, TOPIC, b"junk %d" % i, deps=[make(key, TOPIC, b"ghost %d" % i).id]).wire  # each its own ghost
        assert beta.relay.accept(wire, "alpha") == "stored"
    assert world.run_until(lambda: beta.relay.counts["stored"] == n, 60)
    decodes = [0]
    real = broker_mod.decode

    def counting(wire):
        decodes[0] += 1
        return real(wire)

    monkeypatch.setattr(broker_mod, "decode", counting)
    honest_key = world.keys["beta"]
    msg = None
    for i in range(5):  # honest traffic, one message a second
        msg = make(honest_key, TOPIC, b"honest %d" % i, deps=[msg.id] if msg is not None else [])
        assert beta.relay.accept(msg.wire, "beta") == "stored"
        world.run_for(1.0)
    assert len(world.queue("beta").queue) == 5
    assert decodes[0] <= 5, f"{decodes[0]} re-reads of stored messages for 5 honest deliveries ({n} deferred)"
    assert beta.status()["subscriptions"][0]["deferred"] > 0
