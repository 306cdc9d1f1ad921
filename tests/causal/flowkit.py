"""Flows using ``causal publish`` / ``causal subscribe`` in estates of the simulated network.

Like tests/cast/flowkit.py: each estate's manor flow is built first, its
store becomes the manor's router store, and a stand-in house gives the
behaviours ``io.house.causal``; every skedder is a micro-thread of the
world's one scheduler, so a test is a trace of a seed.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from flowcast.cast.cache import Cache
from flowcast.cast.config import CastConfig
from flowcast.cast.service import CastService
from flowcast.causal.config import CausalConfig, TopicConfig
from flowcast.causal.service import CausalService
from tests.cast.flowkit import build
from tests.causal.kit import TOPIC, key, rules
from tests.routing.kit import World


class FlowCausal:
    """Estates named by ``flows`` (name -> the manor's flow text), all peers; owner: the first; ``publishers`` sign.

    ``causal``: more CausalConfig settings, as a layout's ``causal:`` section gives them.
    """

    def __init__(self, tmp_path: Path, flows: dict[str, str], *, seed: int = 1, publishers=None, causal: dict | None = None,
                 **conditions) -> None:
        self.world = World(seed=seed, **conditions)
        self.names = list(flows)
        self.keys = {n: key(n) for n in self.names}
        publishers = self.names if publishers is None else publishers
        self.topic = TopicConfig.of(TOPIC, bytes(self.keys[self.names[0]].verify_key), [bytes(self.keys[n].verify_key) for n in publishers])
        self.built, self.shims, self.services, skedders = {}, {}, {}, {}
        for n, text in flows.items():
            self.built[n], skedders[n], self.shims[n] = build(self.world, text, tmp_path / f"{n}.flo")
        peers = {n: [m for m in self.names if m != n] for n in self.names}
        self.estates = {n: self.world.routed_estate(n, ["manor"], policy=rules(peers[n]), stores={"manor": self.built[n].store})
                        for n in self.names}
        for a, b in itertools.combinations(self.names, 2):
            self.world.connect(self.estates[a], self.estates[b])
        for n in self.names:
            router = self.estates[n]["manor"]
            (tmp_path / n).mkdir()
            cache = Cache.open(tmp_path / n / "cache.sqlite3", estate=n, clock=self.world.scheduler.clock, scheduler=self.world.scheduler)
            cast = CastService(router, cache=cache, config=CastConfig(subscribers={p: (f"{n}/causal/**",) for p in peers[n]}),
                               inbox=tmp_path / n / "inbox.sqlite3")
            signers = {TOPIC: self.keys[n]} if n in publishers else {}
            config = CausalConfig(topics={TOPIC: self.topic}, peers=tuple(peers[n]), **(causal or {}))
            self.services[n] = CausalService(router, cast, config, state=tmp_path / n / "causal.sqlite3", signers=signers)
            self.shims[n].router, self.shims[n].cast, self.shims[n].causal = router, cast, self.services[n]
        for n, skedder in skedders.items():  # the flows start once their houses have the service
            self.world.scheduler.spawn(skedder.run(self.world.scheduler), name=f"skedder:{n}")

    def store(self, n: str):
        return self.built[n].store

    def run_until(self, predicate, limit: float = 60.0) -> bool:
        return self.world.run_until(predicate, limit)
