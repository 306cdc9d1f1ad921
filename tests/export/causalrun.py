"""One simulated causal run with a Recorder at the subscribing relay: every kind of causal event, known outcomes.

alpha publishes, gamma relays and subscribes (tests/causal/kit.py), on
the virtual clock with 20 ms datagrams, so the export is the same every
run and a fetch takes time.  Shared by the export test (the rows) and the
Spark test (the causal job's figures).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from flowcast.causal.message import make
from flowcast.export.recorder import Recorder
from tests.causal.kit import TOPIC, Causal


def causal_run(tmp: Path, live: Path) -> SimpleNamespace:
    """A dep fetched and a message released after it, a predicate-2 rejection, an equivocation, one abandoned."""
    # nothing flows unasked (follow=False): gamma gets what the test hands its relay, and fetches the rest
    world = Causal(tmp, ("alpha", "gamma"), follow=False, config={"grace": 5.0}, delay=0.02)
    alpha, gamma = world.services["alpha"], world.services["gamma"]
    rec = Recorder(live, estate="gamma", house="manor", clock=world.world.scheduler.clock.now, epoch=0.0)
    house = SimpleNamespace(causal=None, on_close=lambda close: None)  # what attach needs of a House
    chore = rec.follow_causal(house)  # the path ``flowcast run --export`` takes: the service comes later
    gamma.attach(house)
    chore()
    sub = gamma.subscribe(TOPIC, "inbox", predicate=lambda m: "rude" if m.content == b"rude" else None)
    first, second = alpha.publish(TOPIC, b"question"), alpha.publish(TOPIC, b"follow-up")
    assert world.run_until(lambda: first.done and second.done, 10)
    assert gamma.relay.accept(second.msg.wire, "alpha") == "stored"  # before its dep: buffered, dep fetched
    assert world.run_until(lambda: len(world.queue("gamma").queue) == 2, 10)
    rude = make(world.keys["alpha"], TOPIC, b"rude", deps=[second.msg.id])
    fork = make(world.keys["alpha"], TOPIC, b"fork", deps=[second.msg.id])  # the same own previous: equivocation
    ghost = make(world.keys["gamma"], TOPIC, b"never sent")
    stuck = make(world.keys["gamma"], TOPIC, b"waits for the ghost", deps=[ghost.id])
    for msg in (rude, fork, stuck):
        assert gamma.relay.accept(msg.wire, "alpha") == "stored"
    assert world.run_until(lambda: len(world.queue("gamma").queue) == 3, 10)
    genesis = alpha.genesis(TOPIC)
    assert world.run_until(lambda: genesis.done, 10)
    assert gamma.relay.accept(genesis.msg.wire, "alpha") == "stored"
    world.run_for(6.0)  # epoch 0's grace passes: stuck is abandoned
    assert stuck.hash not in sub.mailbox.buffered
    delivered = {item["hash"]: item for item in world.queue("gamma").queue}
    paths = rec.close()
    return SimpleNamespace(world=world, sub=sub, paths=paths, delivered=delivered, first=first.msg, second=second.msg,
                           rude=rude, fork=fork, ghost=ghost, stuck=stuck, genesis=genesis.msg,
                           alpha=bytes(world.keys["alpha"].verify_key).hex(), gamma=bytes(world.keys["gamma"].verify_key).hex())
