"""``flowcast run --export`` follows what a flow wires itself: its router, and its lane and roads too
(issue 14, item 1: stacks a flow opened itself were not recorded)."""

from __future__ import annotations

from types import SimpleNamespace

from flowcast.routing.events import follow_house


class Stack:
    def __init__(self) -> None:
        self.sinks: list[object] = []

    def set_events(self, sink: object) -> None:
        self.sinks.append(sink)


class Router(Stack):
    def __init__(self) -> None:
        super().__init__()
        self.lane: Stack | None = None
        self.roads: dict[str, Stack] = {}


def test_the_router_lane_and_roads_a_flow_wires_are_each_recorded_once_from_when_they_appear() -> None:
    sink = object()
    house = SimpleNamespace(router=None)
    chore = follow_house(house, sink)
    chore()  # no router yet: nothing to do, nothing raised
    router = house.router = Router()
    router.lane = Stack()
    chore()
    assert router.sinks == [sink] and router.lane.sinks == [sink]
    road = router.roads["main"] = Stack()  # `road setup` a few ticks later
    chore()
    chore()
    assert road.sinks == [sink] and router.lane.sinks == [sink] and router.sinks == [sink]  # once each
    second = house.router = Router()  # a flow that sets up a router again
    second.roads["main"] = road  # (its old road kept: not given the sink again)
    chore()
    assert second.sinks == [sink] and road.sinks == [sink]
