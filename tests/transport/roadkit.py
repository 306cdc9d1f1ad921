"""Helpers for road tests: two estates on a seeded simulated network."""

from __future__ import annotations

from flowcast.runtime import Scheduler, VirtualClock
from flowcast.transport.keep import Keep
from flowcast.transport.ports import UdpPort
from flowcast.transport.ports.sim import SimNetwork
from flowcast.transport.road import RoadStack
from flowcast.transport.stack import serve


class World:
    """A scheduler on virtual time, a simulated network, and estates on it."""

    def __init__(self, seed: int = 0, **conditions) -> None:
        self.scheduler = Scheduler(VirtualClock())
        self.net = SimNetwork(self.scheduler, seed=seed, **conditions)

    def estate(self, name: str, address: str | None = None, *, keep: Keep | None = None, policy: str = "always", **options) -> RoadStack:
        keep = keep if keep is not None else Keep(None)
        keep.ensure_local(name)
        return RoadStack(self.net.port(address or name), keep, policy=policy, scheduler=self.scheduler, **options)

    def run_until(self, predicate, limit: float = 60.0, step: float = 0.05) -> bool:
        """Run virtual time until ``predicate()`` holds (True) or ``limit`` seconds pass."""
        clock = self.scheduler.clock
        end = clock.now() + limit
        while clock.now() < end:
            if predicate():
                return True
            target = min(end, clock.now() + step)
            self.scheduler.run(until=target)
            clock.advance_to(target)  # nothing scheduled: time still passes
        return predicate()

    def run_for(self, seconds: float) -> None:
        target = self.scheduler.clock.now() + seconds
        self.scheduler.run(until=target)
        self.scheduler.clock.advance_to(target)

    def pair(self, policy: str = "always", **options) -> tuple[RoadStack, RoadStack]:
        """alpha joined and allowed with beta."""
        alpha = self.estate("alpha", policy=policy, **options)
        beta = self.estate("beta", policy=policy, **options)
        alpha.join("beta")
        assert self.run_until(lambda: alpha.is_allowed("beta") and beta.is_allowed("alpha"), 10)
        return alpha, beta


def udp_roads(*names: str) -> list[RoadStack]:
    """Road stacks on real loopback UDP (each its own keep, policy "always"), not joined yet."""
    stacks = []
    for name in names:
        keep = Keep(None)
        keep.ensure_local(name)
        stacks.append(RoadStack(UdpPort("127.0.0.1", 0), keep, policy="always"))
    return stacks


def udp_road_pair() -> tuple[RoadStack, RoadStack]:
    """alpha and beta on real loopback UDP, joined and allowed both ways."""
    alpha, beta = udp_roads("alpha", "beta")
    alpha.join(beta.address)
    assert serve([alpha, beta], until=lambda: alpha.is_allowed("beta") and beta.is_allowed("alpha"), timeout=5)
    return alpha, beta
