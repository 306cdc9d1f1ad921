"""A real ``flowcast run`` estate and an accepted estate it gives no rule (issue 25, finding 1).

The estate's road asks its router's policy before it holds or decodes a
peer's message: an 8 MiB message from an estate no rule admits is dropped at
the road (counted ``not_admitted`` in the manor's status), never held whole
nor decoded, and a short one is still answered ``denied``.  Real processes,
loopback only; every wait is bounded.
"""

from __future__ import annotations

import sys

import pytest

from flowcast.routing.parcel import pack_message
from flowcast.transport.keep import Keep
from flowcast.transport.ports import UdpPort
from flowcast.transport.road import RoadStack
from flowcast.transport.stack import serve
from tests.house.estates import free_udp_port, idle_flow, start_estate, status, stop_estate, wait_for

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux process semantics")


def test_an_estate_no_rule_admits_cannot_make_a_running_estate_hold_or_decode_its_big_message(tmp_path):
    flows = tmp_path / "flows"
    flows.mkdir()
    idle_flow(flows / "idle.flo", "idle")
    port = free_udp_port()
    layout = tmp_path / "est.yaml"
    layout.write_text(
        f"estate: est\nroads:\n  main: {{port: {port}, acceptance: always}}\n"
        "houses:\n  - {name: manor, flow: flows/idle.flo, manor: true}\n"
    )
    estate = start_estate(layout, houses=1)
    run = tmp_path / "run" / "est"
    keep = Keep(None)
    keep.ensure_local("mallory")
    road = RoadStack(UdpPort("127.0.0.1", 0), keep, policy="always")
    try:
        wait_for(lambda: status(run, "manor").get("roads"), what="the estate's manor status")
        road.join(("127.0.0.1", port))
        assert serve([road], until=lambda: road.is_allowed("est"), timeout=20), "no session with the estate"
        src, dst = ["out", "", "mallory", "main"], ["t", "manor", "est", "main"]
        big = road.send_bytes(pack_message(src, dst, "", 0.0, b"x" * (8 << 20)), "est", timeout=3.0)
        small = road.send_bytes(pack_message(src, dst, "", 0.0, 1), "est", stream=1)
        assert serve([road], until=lambda: big.done and small.done, timeout=30)
        assert big.failed  # its pieces were refused, never acknowledged
        counts = wait_for(lambda: (c := status(run, "manor").get("counts", {})).get("not_admitted") and c.get("denied") and c,
                          timeout=20, what="the drop and the denial in the manor's status")
        assert counts["not_admitted"] >= 1 and counts["denied"] >= 1
    finally:
        road.close()
        stop_estate(estate)
