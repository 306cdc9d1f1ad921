"""Estates of houses on one virtual clock and simulated network.

Every house gets a Store, a Router, a LaneStack; the manor also a RoadStack
per channel.  Everything runs on one scheduler, so a test is repeatable.
"""

from __future__ import annotations

from flowcast.routing import Policy, Router
from flowcast.store import Store
from flowcast.transport.keep import Keep
from flowcast.transport.lane import LaneStack
from flowcast.transport.lanekeys import LaneKeys, new_secret
from flowcast.transport.road import RoadStack
from tests.transport.roadkit import World as _World

#: The policies most routing tests give the two estates: alpha lets beta write; beta lets alpha do anything.
ALLOW_BETA = [{"allow": "write", "estate": "beta"}]
ALLOW_ALPHA = [{"allow": "any", "estate": "alpha"}]


class Estate:
    def __init__(
        self, world: "World", name: str, yards: list[str], channels: tuple[str, ...], policy, role: str, acceptance: str, lane_keys: bool = False,
        stores: dict | None = None,
    ) -> None:
        self.name = name
        #: The estate's lane secret when its lanes are authenticated (as a supervisor's are).
        self.lane_secret = new_secret() if lane_keys else None
        self.houses: dict[str, Router] = {}
        net = world.net
        sched = world.scheduler
        addresses = {yard: f"{name}/{yard}" for yard in yards}
        manor = yards[0]
        self.keep = Keep(None)
        self.keep.ensure_local(name, role=role)
        self.roads: dict[str, RoadStack] = {}
        for yard in yards:
            store = (stores or {}).get(yard)  # a built flow's store, or a bare one
            if store is None:
                store = Store(sched.clock.now, name=yard)
            router = Router(store, estate=name, yard=yard, manor=manor, policy=Policy(policy), scheduler=sched)
            lane = LaneStack(
                net.port(addresses[yard]),
                yard,
                {other: addr for other, addr in addresses.items() if other != yard},
                scheduler=sched,
                acks=True,
                keys=None if self.lane_secret is None else LaneKeys.derive(self.lane_secret, yard, yards),
            )
            router.attach_lane(lane)
            if yard == manor:
                for channel in channels:
                    road = RoadStack(net.port(f"{name}:{channel}"), self.keep, policy=acceptance, scheduler=sched)
                    router.attach_road(channel, road)
                    self.roads[channel] = road
            self.houses[yard] = router

    def __getitem__(self, yard: str) -> Router:
        return self.houses[yard]

    def store(self, yard: str) -> Store:
        return self.houses[yard].store


class World(_World):
    def routed_estate(
        self,
        name: str,
        yards: list[str],
        *,
        channels: tuple[str, ...] = ("main",),
        policy=(),
        role: str = "estate",
        acceptance: str = "always",
        lane_keys: bool = False,
        stores: dict | None = None,
    ) -> Estate:
        return Estate(self, name, yards, channels, list(policy), role, acceptance, lane_keys, stores)

    def connect(self, a: Estate, b: Estate, channel: str = "main") -> None:
        a.roads[channel].join(f"{b.name}:{channel}")
        assert self.run_until(
            lambda: a.roads[channel].is_allowed(b.name) and b.roads[channel].is_allowed(a.name), 10
        ), "estates did not join"


def route_send(alpha, dst):
    """A 'route send' behaviour of alpha's w1 draining the queue share ``outq``: (outq, the behaviour,
    a function that puts back what was patched to give it its house)."""
    import flowcast.routing.behaviours as behaviours

    outq = alpha.store("w1").queue("outq")

    class Io:
        input = outq
        house = type("House", (), {"router": alpha["w1"]})()

    original = behaviours._house
    behaviours._house = lambda io: io.house
    try:
        return outq, behaviours.RouteSend(Io(), dst), lambda: setattr(behaviours, "_house", original)
    except Exception:
        behaviours._house = original
        raise
