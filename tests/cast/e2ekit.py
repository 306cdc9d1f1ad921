"""Estates that publish to each other on the simulated network, each with a cache and an end-to-end house.

Every estate has a manor (the cache, the publisher) and a house ``home``
where its users live (an inbox, the EndToEnd layer).  Every estate may
subscribe to every other's ``contacts/**`` and ``messages/**``.  The
network records every datagram (lanes included, which are not encrypted
in simulation), so a test can look for plaintext in all of it.
"""

from __future__ import annotations

from flowcast.cast.cache import Cache
from flowcast.cast.config import CastConfig
from flowcast.cast.e2e import EndToEnd
from flowcast.cast.service import CastService
from tests.routing.kit import World


class Estates:
    def __init__(self, tmp_path, names=("abc", "xyz"), *, seed: int = 1, **conditions) -> None:
        self.tmp_path = tmp_path
        self.world = World(seed=seed, record=True, **conditions)
        self.names = names
        self.estates, self.caches, self.pubs, self.homes, self.e2e = {}, {}, {}, {}, {}
        for name in names:
            others = [o for o in names if o != name]
            policy = [{"allow": "subscribe", "estate": o, "share": "cast"} for o in others]
            policy += [{"allow": "write", "estate": o, "share": "cast.*"} for o in others]
            self.estates[name] = self.world.routed_estate(name, ["manor", "home"], policy=policy)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                self.world.connect(self.estates[a], self.estates[b])
        for name in names:
            others = [o for o in names if o != name]
            config = CastConfig(subscribers={o: (f"{name}/contacts/**", f"{name}/messages/**") for o in others})
            path = tmp_path / name / "cast" / "cache.sqlite3"
            path.parent.mkdir(parents=True, exist_ok=True)
            self.caches[name] = Cache.open(path, estate=name, clock=self.world.scheduler.clock, scheduler=self.world.scheduler)
            self.pubs[name] = CastService(self.estates[name]["manor"], cache=self.caches[name], config=config)
            self.homes[name] = CastService(self.estates[name]["home"], config=config, inbox=tmp_path / name / "home" / "inbox.sqlite3")
            self.e2e[name] = EndToEnd(self.homes[name], tmp_path / name)

    def follow_all(self) -> None:
        for name in self.names:
            for other in self.names:
                if other != name:
                    self.e2e[name].follow(other)
        subs = [s for e in self.e2e.values() for s in e.follows]
        assert self.run_until(lambda: all(s.state == "active" for s in subs), 20)

    def mailbox(self, estate: str, user: str):
        return self.estates[estate].store("home").queue(f"mail.{user}")

    def run_until(self, predicate, limit: float = 30.0) -> bool:
        return self.world.run_until(predicate, limit)

    def done(self, *tickets) -> bool:
        return self.run_until(lambda: all(t.done for t in tickets), 20) and all(t.error is None for t in tickets)

    def wire(self) -> bytes:
        """Every datagram the simulated network carried, roads and lanes, joined."""
        return b"".join(data for _t, _src, _dst, data in self.world.net.trace)


def bodies(queue) -> list[bytes]:
    return [item["body"] for item in queue.queue]
