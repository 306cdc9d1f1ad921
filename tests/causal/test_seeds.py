"""Three estates on a lossy, duplicating, reordering simulated network, over many seeds.

Each estate publishes while it receives, naming as deps what it has
delivered so far (the frontier, or a random choice of it), so the graph
grows across estates the way a conversation does.  Whatever the seed, every
estate must end with every message, each once, each after all its deps.
One relay in each run misses a quarter of what its peers forward, as a
relay behind a gap would, so messages reach it before their deps and it
fetches them; what it misses that nothing names, it learns of from the
heads its peers announce.  One topology is a line (alpha - beta - gamma): alpha and gamma never talk,
so everything between them is relayed, and fetched, through beta.
"""

from __future__ import annotations

import random

import pytest

from tests.causal.kit import TOPIC, Causal

#: delays long against the pauses between publishes, so a reply often overtakes what it answers on another path
FAULTS = {"loss": 0.10, "duplicate": 0.02, "reorder": 0.05, "delay": (0.005, 0.15)}
LINE = {"alpha": ["beta"], "beta": ["alpha", "gamma"], "gamma": ["beta"]}


def causal_problems(delivered: list[dict], expected: set[str]) -> list[str]:
    """What is wrong with one estate's delivered sequence: early, twice, missing or unknown."""
    seen: set[str] = set()
    problems = []
    for item in delivered:
        if item["hash"] in seen:
            problems.append(f"{item['hash'][:8]} delivered twice")
        for dep in item["deps"]:
            if dep not in seen:
                problems.append(f"{item['hash'][:8]} delivered before its dep {dep[:8]}")
        seen.add(item["hash"])
    if seen - expected:
        problems.append(f"{len(seen - expected)} delivered that nobody published")
    if expected - seen:
        problems.append(f"{len(expected - seen)} of {len(expected)} never delivered")
    return problems


def skip_some(world: Causal, name: str, rng: random.Random, fraction: float) -> dict:
    """Make ``name``'s relay miss ``fraction`` of what its peers forward (a partial relay): it must fetch them.

    Set the returned dict's "fraction" to 0 to heal it.
    """
    service = world.services[name]
    state = {"fraction": fraction, "skipped": 0}

    def arrived(peer, share) -> None:
        while share.queue:
            item = share.queue.popleft()
            if item.get("tag") == "cast" and rng.random() < state["fraction"]:
                state["skipped"] += 1
                continue
            service.relay.accept(item.get("data"), peer)

    service.sync._arrived_from = arrived
    return state


def converse(world: Causal, rng: random.Random, rounds: int, per_round: int) -> set[str]:
    """Publish from random estates between short runs of the network; the hashes published."""
    published: set[str] = set()
    for _ in range(rounds):
        for _ in range(per_round):
            name = rng.choice(world.names)
            service = world.services[name]
            if rng.random() < 0.3:
                seen = [i for i in world.queue(name).queue]
                picked = rng.sample(seen, min(len(seen), rng.randint(0, 3)))
                from flowcast.causal.message import TopicMsgID

                deps = [TopicMsgID(bytes.fromhex(i["publisher"]), bytes.fromhex(i["hash"]),
                                   service.relay.index[bytes.fromhex(i["hash"])].hsig) for i in picked]
                done = service.publish(TOPIC, f"{name} picks {len(deps)}".encode(), deps=deps)
            else:
                done = service.publish(TOPIC, f"{name} says".encode())
            assert done.error is None, done.error
            published.add(done.msg.hash.hex())
        world.run_for(rng.uniform(0.0, 0.1))
    return published


def test_every_estate_delivers_a_linear_extension_of_the_whole_graph_over_many_seeds(tmp_path) -> None:
    totals: dict[str, int] = {"buffered": 0, "wanted": 0, "fetched": 0, "lost": 0, "skipped": 0, "heads": 0}
    for seed in range(12):
        world = Causal(tmp_path / str(seed), seed=seed, peers=LINE if seed % 2 else None, **FAULTS)
        for n in world.names:
            world.services[n].subscribe(TOPIC, "inbox")
        rng = random.Random(seed)
        partial = skip_some(world, rng.choice(world.names), rng, 0.25)
        published = converse(world, rng, rounds=10, per_round=5)
        # the partial relay stays partial: what it misses that nothing names reaches it through the
        # heads its peers announce (docs/causal.md, "Heads"), the rest as missing deps
        assert world.run_until(lambda: all(len(world.queue(n).queue) >= len(published) for n in world.names), 120), {
            n: (seed, len(world.queue(n).queue), world.services[n].status()["sync"]) for n in world.names}
        world.run_for(2.0)  # late duplicates, if any, would land now
        for n in world.names:
            assert causal_problems(list(world.queue(n).queue), published) == [], (seed, n)
            status = world.services[n].status()
            assert status["subscriptions"][0]["buffered"] == 0 and status["sync"]["missing"] == 0, (seed, n)
            totals["buffered"] += world.services[n].broker.subs["log>inbox"].mailbox.counts["buffered"]
            totals["wanted"] += world.services[n].sync.counts["wanted"]
            totals["fetched"] += world.services[n].sync.counts["fetched"]
            totals["heads"] += world.services[n].sync.counts["wanted_heads"]
        totals["lost"] += world.world.net.counts["lost"]
        totals["skipped"] += partial["skipped"]
        if seed % 2:  # the line: alpha's messages reached gamma only through beta
            assert world.services["gamma"].relay.counts["stored"] == len(published)
        for n in world.names:
            world.stop(n)
    # the runs exercised what they are about: loss, messages arriving before their deps, and fetches
    assert totals["lost"] > 100 and totals["buffered"] > 100 and totals["fetched"] > 20 and totals["heads"] > 0, totals


@pytest.mark.parametrize("seed", range(6))
def test_an_estate_that_was_down_catches_up_in_causal_order(tmp_path, seed: int) -> None:
    world = Causal(tmp_path, seed=seed, **FAULTS)
    for n in world.names:
        world.services[n].subscribe(TOPIC, "inbox")
    rng = random.Random(seed)
    published = converse(world, rng, rounds=2, per_round=4)
    world.stop("gamma")
    world.world.net.partition(["gamma:main"], ["alpha:main", "beta:main"])  # down: nothing reaches it
    live = Causal.__new__(Causal)  # the two that stay up keep talking
    live.__dict__.update(world.__dict__, names=["alpha", "beta"])
    published |= converse(live, rng, rounds=4, per_round=5)
    world.world.net.heal()
    gamma = world.start("gamma")
    gamma.subscribe(TOPIC, "inbox")
    assert world.run_until(lambda: all(len(world.queue(n).queue) >= len(published) for n in world.names), 120)
    world.run_for(2.0)
    for n in world.names:
        assert causal_problems(list(world.queue(n).queue), published) == [], (seed, n)
