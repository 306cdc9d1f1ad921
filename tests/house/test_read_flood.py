"""Issue 25, finding 5, from outside: an accepted estate reading a large share every 20 ms of a
real ``flowcast run`` estate gets what its read limits allow, and an honest reader beside it is
answered every time.

Before: each read packed and sent the whole share (a read every 20 ms of 8 MiB left the house
deaf for over a minute).  Here the victim's layout limits reads to 1 MiB/s per estate.
"""

from __future__ import annotations

import time
from pathlib import Path

from flowcast.routing import Policy, Router
from flowcast.store import Store
from flowcast.transport.keep import Keep
from flowcast.transport.ports import UdpPort
from flowcast.transport.road import RoadStack
from flowcast.transport.stack import serve
from tests.house.estates import free_udp_port, start_estate, status, stop_estate, wait_for, write_flow

PLAY = Path(__file__).resolve().parent / "readplay.py"
RATE = 1 << 20  # the victim's read_bytes_per_second
SECONDS = 3.0


def _victim(tmp_path: Path, port: int) -> Path:
    flow = write_flow(tmp_path / "fill.flo", "filler", f"load {PLAY}\n\nframer fill be active first hold\n  frame hold\n    do readplay fill\n")
    layout = tmp_path / "beta.yaml"
    layout.write_text(
        f"""
estate: beta
run: run
keep: keep
roads:
  main: {{port: {port}, acceptance: always}}
policy:
  - {{allow: read}}
shares:
  read_bytes_per_second: {RATE}
houses:
  - {{name: manor, flow: {flow}, manor: true}}
"""
    )
    return layout


def _reader(name: str) -> tuple[Router, RoadStack]:
    keep = Keep(None)
    keep.ensure_local(name)
    road = RoadStack(UdpPort("127.0.0.1", 0), keep, policy="always")
    store = Store(time.monotonic, name=name)
    store.queue("answer", budget=64 << 20)
    router = Router(store, estate=name, yard="manor")
    router.attach_road("main", road)
    return router, road


def test_a_read_flood_gets_its_limit_and_an_honest_reader_is_answered(tmp_path: Path) -> None:
    port = free_udp_port()
    run = tmp_path / "run"
    estate = start_estate(_victim(tmp_path, port))
    mallory, mroad = _reader("mallory")
    alpha, aroad = _reader("alpha")
    roads = [mroad, aroad]
    try:
        wait_for(lambda: status(run, "manor").get("ports"), 30, what="the victim's status")
        for road in roads:
            road.join(("127.0.0.1", port))
        assert serve(roads, until=lambda: all(road.is_allowed("beta") for road in roads), timeout=15)
        honest = alpha.store.get("answer")
        waits: list[float] = []
        floods = 0
        start = time.monotonic()
        for tick in range(int(SECONDS / 0.02)):  # a read every 20 ms; an honest one every 100 ms
            mallory.send("big@.beta", None, src="answer", tag="read")
            floods += 1
            if tick % 5 == 0:
                asked, before = time.monotonic(), len(honest.queue)
                alpha.send("small@.beta", None, src="answer", tag="read")
                if serve(roads, until=lambda: len(honest.queue) > before, timeout=5):
                    waits.append(time.monotonic() - asked)
            serve(roads, until=lambda: time.monotonic() >= start + 0.02 * (tick + 1), timeout=0.05)
        elapsed = time.monotonic() - start
        serve(roads, timeout=1.0)  # what is in flight lands
        assert len(waits) == int(SECONDS / 0.02) // 5, "an honest read went unanswered"
        got = mallory.store.get("answer")
        answered = len(got.queue)
        # A second's burst and a second's rate per second: never the 150 x 256 KiB it asked for.
        assert answered * (256 << 10) <= RATE * (elapsed + 2) and answered < floods / 2
        refused = wait_for(lambda: status(run, "manor").get("counts", {}).get("read_limited"), 10, what="read_limited in status")
        assert refused >= floods - answered - 2
        errors = mallory.store.get("answer.error")
        assert errors is None or len(errors.queue) <= 10 * (elapsed + 2)  # refusals answered within their rate
        waits.sort()
        print(f"honest read p50 {waits[len(waits) // 2] * 1e3:.1f} ms, max {waits[-1] * 1e3:.1f} ms; flood answered {answered} of {floods}")
    finally:
        for road in roads:
            road.close()
        stop_estate(estate)
