"""Two or three estates on the simulated network with CAST wired: abc publishes, others subscribe."""

from __future__ import annotations

from flowcast.cast.config import CastConfig
from flowcast.cast.service import CastService
from tests.cast.memcache import Cache as StandIn
from tests.routing.kit import World

try:  # the SQLite cache once its branch is merged; the in-memory stand-in with its API until then
    from flowcast.cast.cache import Cache as RealCache
except ImportError:
    RealCache = None

#: What a subscribing estate lets in from abc: the CAST deliveries to its subscription shares.
FROM_ABC = {"allow": "write", "estate": "abc", "share": "cast.*"}


def subscribe_rule(estate: str) -> dict:
    return {"allow": "subscribe", "estate": estate, "share": "cast"}


class Cast:
    """abc (manor + w1) with the cache in its manor; receivers ``others`` (manor + bob + carol)."""

    def __init__(self, tmp_path, *, seed: int = 1, others=("xyz",), grants=None, config: dict | None = None, cache=None, retention: float = 86400.0, max_bytes: int = 1 << 30, **conditions) -> None:
        self.world = World(seed=seed, **conditions)
        grants = grants if grants is not None else {name: ("abc/**",) for name in others}
        self.abc = self.world.routed_estate("abc", ["manor", "w1"], policy=[subscribe_rule(name) for name in others])
        self.estates = {}
        for name in others:
            self.estates[name] = self.world.routed_estate(name, ["manor", "bob", "carol"], policy=[FROM_ABC])
            self.world.connect(self.abc, self.estates[name])
        self.clock = self.world.scheduler.clock.now
        if RealCache is not None:
            if cache is not None:  # the cache of an earlier run: a restarted house reopens its file
                cache.close()
            path = tmp_path / "abc" / "cast" / "cache.sqlite3"
            path.parent.mkdir(parents=True, exist_ok=True)
            cache = RealCache.open(path, estate="abc", clock=self.world.scheduler.clock, retention=retention,
                                   max_bytes=max_bytes, scheduler=self.world.scheduler)
        elif cache is None:
            cache = StandIn.open(None, estate="abc", clock=self.clock, retention=retention, max_bytes=max_bytes, scheduler=self.world.scheduler)
        else:  # the stand-in of an earlier run, on this run's clock
            cache.clock, cache.scheduler = self.clock, self.world.scheduler
        self.cache = cache
        self.config = CastConfig(subscribers=grants, **(config or {}))
        self.pub = CastService(self.abc["manor"], cache=self.cache, config=self.config)
        self.services = {}
        for name in others:
            for yard in ("bob", "carol"):
                self.services[(name, yard)] = CastService(self.estates[name][yard], config=self.config, inbox=tmp_path / name / yard / "inbox.sqlite3")

    def service(self, estate: str = "xyz", yard: str = "bob") -> CastService:
        return self.services[(estate, yard)]

    def queue(self, estate: str = "xyz", yard: str = "bob", name: str = "inbox"):
        return self.estates[estate].store(yard).queue(name)

    def turn(self, estate: str = "xyz", yard: str = "bob") -> None:
        """A turn of that house's flow ends, and the house runs on to the commit of its acknowledgements."""
        self.estates[estate].store(yard).end_turn()
        self.world.run_for(0.001)

    def run_until(self, predicate, limit: float = 60.0) -> bool:
        return self.world.run_until(predicate, limit)

    def publish_many(self, n: int, prefix: str = "abc/messages/alice", **options) -> list:
        tickets = [self.pub.publish(f"{prefix}/{i}", b"m%06d" % i, publisher="alice", **options) for i in range(n)]
        assert self.run_until(lambda: all(t.done for t in tickets), 30)
        return tickets


def payloads(queue) -> list[bytes]:
    return [item["data"] for item in queue.queue if item["tag"] == "cast"]


class DiskFull:
    """Makes ``target.method`` fail as a full disk does while ``failing`` is true, else call through."""

    def __init__(self, target, method: str) -> None:
        import sqlite3

        self.failing = True
        real = getattr(target, method)

        def call(*args):
            if self.failing:
                raise sqlite3.OperationalError("database or disk is full")
            return real(*args)

        setattr(target, method, call)


class SentTicket:
    """A publish the stand-in cache took; the test says when it is done and how."""

    def __init__(self) -> None:
        self.done, self.seq, self.duplicate, self.error = False, 0, False, None


class CacheStandIn:
    """Stands for the cache's house behind an Outbox: ``sent`` is (id, name, recipients) per send."""

    def __init__(self) -> None:
        self.sent: list[tuple[bytes, str, object]] = []
        self.tickets: list[SentTicket] = []

    def send(self, name, data, id, publisher, recipients):
        self.sent.append((id, name, recipients))
        self.tickets.append(SentTicket())
        return self.tickets[-1]


def outbox_house(tmp_path, cache: CacheStandIn):
    """A Cast whose bob's turn publishes go to ``cache``: (cast, bob's service, bob's store)."""
    from flowcast.cast.behaviours import word
    from flowcast.cast.outbox import Outbox

    cast = Cast(tmp_path)
    svc = cast.service()
    svc.subscriber.settler.outbox = Outbox(cache.send, cast.world.scheduler.clock.now, word)
    return cast, svc, cast.estates["xyz"].store("bob")
