"""Helpers for road tests: two estates on a seeded simulated network."""

from __future__ import annotations

from flowcast.runtime import Scheduler, VirtualClock
from flowcast.transport.keep import Keep
from flowcast.transport.ports.sim import SimNetwork
from flowcast.transport.road import RoadStack


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
