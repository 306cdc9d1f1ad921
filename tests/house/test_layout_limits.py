"""A road's memory bounds in the layout: hold budget, expiry, reaping, backlog, message size."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowcast.house.layout import load_layout
from flowcast.transport.budget import DEFAULT_BACKLOG_MESSAGES, DEFAULT_HOLD_BUDGET
from flowcast.transport.keep import Keep
from flowcast.transport.ports.sim import SimNetwork
from flowcast.transport.road import RoadStack
from flowcast.runtime import Scheduler, VirtualClock
from tests.house.test_layout import MINIMAL, one_error, tree, write  # noqa: F401 - tree is a fixture

LIMITS = """\
roads:
  main:
    port: 0
    hold_budget: 33554432
    incomplete_after: 10
    idle_after: 300
    backlog_messages: 500
    backlog_bytes: 1048576
    datagram_size: 1400
    max_message: 1048576
"""


def road_of(options: dict) -> RoadStack:
    scheduler = Scheduler(VirtualClock())
    keep = Keep(None)
    keep.ensure_local("alpha")
    return RoadStack(SimNetwork(scheduler).port("alpha"), keep, scheduler=scheduler, **options)


def test_limits_load_and_reach_the_road_stack(tree: Path) -> None:
    spec = load_layout(write(tree, MINIMAL + LIMITS)).roads["main"]
    options = spec.stack_options()
    assert options == {"hold_budget": 32 << 20, "incomplete_after": 10, "idle_after": 300,
                       "backlog_messages": 500, "backlog_bytes": 1 << 20, "datagram_size": 1400,
                       "max_message": 1 << 20}
    road = road_of(options)
    assert road.hold_budget.limit == 32 << 20 and road.hold_budget.incomplete_after == 10.0
    assert road.idle_after == 300.0 and road.backlog_messages == 500 and road.backlog_bytes == 1 << 20
    assert road.configured_datagram == road.datagram_size == 1400  # every remote's, loopback or not
    assert road.max_message == 1 << 20


def test_limits_not_given_keep_the_stack_defaults(tree: Path) -> None:
    spec = load_layout(write(tree, MINIMAL + "roads: {main: {port: 0}}\n")).roads["main"]
    assert spec.stack_options() == {}
    road = road_of(spec.stack_options())
    assert road.hold_budget.limit == DEFAULT_HOLD_BUDGET and road.backlog_messages == DEFAULT_BACKLOG_MESSAGES


@pytest.mark.parametrize("key, value, expected", [
    ("hold_budget", "10", "outside 1048576.."),
    ("hold_budget", "lots", "must be a whole number"),
    ("incomplete_after", "0", "outside 1..86400"),
    ("idle_after", "5", "outside 10.."),
    ("backlog_messages", "-1", "outside 1.."),
    ("backlog_bytes", "1.5", "must be a whole number"),
    ("datagram_size", "256", "outside 512..65527"),
    ("max_message", "1000", "outside 65536.."),
])
def test_bad_limits_are_located_errors(tree: Path, key: str, value: str, expected: str) -> None:
    e = one_error(tree, MINIMAL + f"roads:\n  main:\n    port: 0\n    {key}: {value}\n")
    assert expected in e.message and key in e.message
    assert e.where.line == 8
