"""Estates on the simulated network, each with a CAST cache and a causal relay in its manor."""

from __future__ import annotations

import itertools

from nacl.signing import SigningKey

from flowcast.cast.cache import Cache
from flowcast.cast.config import CastConfig
from flowcast.cast.service import CastService
from flowcast.causal.config import CausalConfig, TopicConfig
from flowcast.causal.service import CausalService
from tests.routing.kit import World

TOPIC = "log"


def key(name: str) -> SigningKey:
    """A fixed key per name, so runs repeat."""
    return SigningKey(name.encode().ljust(32, b"k")[:32])


def rules(peers) -> list[dict]:
    out = []
    for peer in peers:
        out += [
            {"allow": "write", "estate": peer, "share": "cast.*"},
            {"allow": "subscribe", "estate": peer, "share": "cast"},
            {"allow": "causal", "estate": peer, "share": "causal"},
        ]
    return out


class Causal:
    """Estates ``names`` (all peers of each other unless ``peers`` says), one topic, owner = the first."""

    def __init__(self, tmp_path, names=("alpha", "beta", "gamma"), *, seed: int = 1, peers: dict | None = None,
                 owner: str | None = None, publishers=None, config: dict | None = None, connect: bool = True, follow: bool = True,
                 topics: tuple[str, ...] = (), **conditions) -> None:
        self.tmp_path = tmp_path
        self.world = World(seed=seed, **conditions)
        self.names = list(names)
        self.peers = peers if peers is not None else {n: [m for m in names if m != n] for n in names}
        self.keys = {n: key(n) for n in names}
        owner = owner or names[0]
        publishers = publishers if publishers is not None else names
        self.topic = TopicConfig.of(TOPIC, bytes(self.keys[owner].verify_key), [bytes(self.keys[n].verify_key) for n in publishers])
        #: TOPIC and ``topics``, each with the same owner and publishers
        self.topics = {t: TopicConfig.of(t, self.topic.owner, self.topic.publishers) for t in (TOPIC, *topics)}
        self.options = config or {}
        self.follow = follow
        self.estates = {n: self.world.routed_estate(n, ["manor"], policy=rules(self.peers[n])) for n in names}
        if connect:
            for a, b in itertools.combinations(names, 2):
                if b in self.peers[a] or a in self.peers[b]:
                    self.world.connect(self.estates[a], self.estates[b])
        self.caches = {}
        self.casts = {}
        self.services: dict[str, CausalService] = {}
        for n in names:
            self.start(n)

    def start(self, n: str) -> CausalService:
        router = self.estates[n]["manor"]
        path = self.tmp_path / n / "cache.sqlite3"
        path.parent.mkdir(parents=True, exist_ok=True)
        cache = Cache.open(path, estate=n, clock=self.world.scheduler.clock, scheduler=self.world.scheduler)
        grants = {p: (f"{n}/causal/**",) for p in self.peers[n]}
        cast = CastService(router, cache=cache, config=CastConfig(subscribers=grants), inbox=self.tmp_path / n / "inbox.sqlite3")
        config = CausalConfig(topics=self.topics, peers=tuple(self.peers[n]), **self.options)
        signers = {t: self.keys[n] for t in self.topics} if bytes(self.keys[n].verify_key) in self.topic.publishers else {}
        service = CausalService(router, cast, config, state=self.tmp_path / n / "causal.sqlite3", signers=signers, follow=self.follow)
        self.caches[n], self.casts[n], self.services[n] = cache, cast, service
        return service

    def stop(self, n: str, taken: bool = True) -> None:
        """Close a relay and its cache as a house exit would (its estate's roads stay up).

        ``taken``: the flow had taken and finished with everything its queues hold, so the last turn
        acknowledged it (the queues keep their items, as the test's record of what the flow saw).
        False: none of it was acknowledged; a restart hands it over again, flagged redelivered.
        """
        if taken:
            held = {id(h.queue): h.queue for h in self.services[n].broker.handoffs.values()}
            queues = [(queue, list(queue.queue)) for queue in held.values()]
            for queue, _items in queues:
                queue.queue.clear()
            self.estates[n].store("manor").end_turn()
            for queue, items in queues:
                queue.queue.extend(items)
        self.services[n].close()
        self.casts[n].close()
        self.caches[n].close()

    def queue(self, n: str, into: str = "inbox"):
        return self.estates[n].store("manor").queue(into)

    def run_until(self, predicate, limit: float = 60.0) -> bool:
        return self.world.run_until(predicate, limit)

    def run_for(self, seconds: float) -> None:
        end = self.world.scheduler.clock.now() + seconds
        self.world.run_until(lambda: self.world.scheduler.clock.now() >= end, seconds + 1)


def hashes(queue) -> list[str]:
    return [item["hash"] for item in queue.queue]


def shown(world: Causal, name: str, kind: str) -> dict:
    """What ``name``'s share ``causal.<kind>`` shows for the topic (missing, rejected, abandoned, ...)."""
    return world.estates[name].store("manor").share(f"causal.{kind}").get(TOPIC) or {}


def step_until(world: Causal, predicate, limit: float = 5.0, step: float = 0.0005) -> bool:
    """Like Causal.run_until, in steps short enough to see a state that lasts less than a round trip."""
    scheduler = world.world.scheduler
    end = scheduler.clock.now() + limit
    while scheduler.clock.now() < end:
        if predicate():
            return True
        target = scheduler.clock.now() + step
        scheduler.run(until=target)
        scheduler.clock.advance_to(target)
    return predicate()
