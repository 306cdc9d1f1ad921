"""A House's drain on stop, in one process: it waits for acknowledgements, not for the clock,
and what never gets one is refused into the source's own error share and counted in the report.

Yard ``a`` is a House with a router and an acknowledged lane; yard ``b`` is
a bare LaneStack in the same directory: run on the house's scheduler it
acknowledges at once, left alone it never answers.
"""

from __future__ import annotations

import time
from pathlib import Path

from flowcast.flow import parse_flo
from flowcast.house import House
from flowcast.routing.parcel import open_data, open_header
from flowcast.routing.wiring import wire_lane, wire_router
from flowcast.transport.lane import LaneStack
from flowcast.transport.ports import UxdPort, uxd_address

FLOW = "house tiny\nframer main be active first idle\n  frame idle\n"
N = 5


def _house(lanes: Path) -> House:
    house = House(parse_flo(FLOW, "tiny.flo").house("tiny"), out=lambda line: None)
    wire_router(house, estate="alpha", yard="a", manor="a")
    wire_lane(house, lanes, ["a", "b"], keys=None)
    house.store.queue("out")  # the source share: errors about what it sent land beside it, in out.error
    return house


def _send_then_stop(house: House) -> None:
    """A flow's last tick: messages handed to the lane, then the stop (nothing acknowledged yet)."""
    for n in range(N):
        assert house.router.send("inbox@b", {"n": n}, src="out")
    house.stop()


def test_a_stop_waits_for_the_acknowledgements_and_no_longer(tmp_path: Path) -> None:
    lanes = tmp_path / "lane"
    house = _house(lanes)
    peer = LaneStack(UxdPort(lanes, "b", scheduler=house.scheduler), "b", {"a": uxd_address(lanes, "a")},
                     scheduler=house.scheduler, acks=True)
    try:
        house.scheduler.call_later(0.05, _send_then_stop, house)
        began = time.monotonic()
        house.run(drain=30.0)
        took = time.monotonic() - began
        report = house.drained
        assert report.at_stop == {"lane": N}  # in flight when the framers stopped...
        assert report.drained and report.left == {} and report.clean  # ...and all acknowledged
        assert took < 5.0 and report.took < 5.0, "the stop waited the drain time, not the acknowledgements"
        got = [open_data(m.data, open_header(m.data)[4]) for m in peer.receive_many()]
        assert got == [{"n": n} for n in range(N)]
    finally:
        peer.close()


def test_what_is_never_acknowledged_lands_in_the_source_error_share_and_the_report(tmp_path: Path) -> None:
    lanes = tmp_path / "lane"
    house = _house(lanes)
    silent = UxdPort(lanes, "b")  # bound, so datagrams are taken by the kernel, but nobody reads or answers
    try:
        house.scheduler.call_later(0.05, _send_then_stop, house)
        house.run(drain=0.3)
        report = house.drained
        assert not report.drained and report.left == {"lane": N}
        assert 0.3 <= report.took < 2.0
        assert report.undelivered == N
        ((src, dst, tag, kind), count), = report.refused.items()
        assert (src, dst, kind, count) == ("out@a.alpha/main", "inbox@b.alpha/main", "undelivered", N)
        assert report.as_dict()["routes"][0]["reason"] == "transport: stack closed"
        errors = house.store.get("out.error").queue  # the local source heard of each, the usual way
        assert [e["data"]["kind"] for e in errors] == ["undelivered"] * N
        assert report.errors_lost == 0  # each report reached its source, here in this house
        assert any("not delivered, reported here" in line for line in report.lines("a"))
    finally:
        silent.close()
