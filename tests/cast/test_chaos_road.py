"""CAST between two estates on real UDP through the chaos relay: exactly once, in per-publisher order.

tests/cast/test_faults.py proves the same promise on the simulated network
over many seeds; this is the real stack -- RoadStacks on 127.0.0.1, the
SQLite cache and inbox, a real clock -- with the chaos relay
(flowcast/transport/chaos.py) losing 10%, duplicating 2% and reordering
5% of the datagrams in both directions.
"""

from __future__ import annotations

from collections import defaultdict

from flowcast.cast import CastConfig
from flowcast.runtime import RealClock, Scheduler
from flowcast.transport.chaos import ChaosRelay
from tests.cast.realkit import FROM_ABC, SUBSCRIBE_FROM_XYZ, drain, manor, run_for, run_until

COUNT = 5000
PUBLISHERS = ("alice", "carol", "dave")
#: Small batches on Internet-sized datagrams: the stream is hundreds of datagrams for the relay to hit.
CONFIG = CastConfig(subscribers={"xyz": ("abc/**",)}, window=40)
ROAD = {"datagram_size": 1200}


def test_exactly_once_in_order_through_the_chaos_relay(tmp_path):
    scheduler = Scheduler(RealClock())
    xyz = manor("xyz", scheduler, tmp_path / "xyz", policy=[FROM_ABC], inbox=True, config=CONFIG, road=ROAD)
    relay = ChaosRelay(("127.0.0.1", 0), xyz.router.roads["main"].address, loss=0.10, duplicate=0.02, reorder=0.05,
                       delay=(0.0002, 0.002), seed=12).start()
    abc = manor("abc", scheduler, tmp_path / "abc", policy=[SUBSCRIBE_FROM_XYZ], cache=True, config=CONFIG, road=ROAD)
    try:
        road_abc, road_xyz = abc.router.roads["main"], xyz.router.roads["main"]
        road_abc.join(relay.address)  # abc reaches xyz only through the relay, and xyz answers through it
        assert run_until(scheduler, lambda: road_abc.is_allowed("xyz") and road_xyz.is_allowed("abc"), 10), "no join"
        sub = xyz.cast.subscribe("abc/messages/**", estate="abc", into="inbox")
        assert run_until(scheduler, lambda: sub.state == "active", 10), sub

        got: list = []
        queue = xyz.store.queue("inbox")
        tickets = []
        for i in range(COUNT):  # published in slices, so the stream is live while the relay does its worst
            who = PUBLISHERS[i % len(PUBLISHERS)]
            tickets.append(abc.cast.publish(f"abc/messages/{who}/{i}", b"%s %06d" % (who.encode(), i), publisher=who))
            if i % 250 == 249:
                assert run_until(scheduler, lambda: drain(queue, got) >= 0 and all(t.done for t in tickets), 10)
        assert run_until(scheduler, lambda: all(t.done for t in tickets), 10)
        assert all(t.error is None and not t.duplicate for t in tickets)
        assert run_until(scheduler, lambda: drain(queue, got) >= COUNT, 20), (len(got), sub, relay.counts)
        run_for(scheduler, 0.5, lambda: drain(queue, got))  # anything more (a duplicate) would come now
        assert len(got) == COUNT

        ids = [item["id"] for item in got]
        assert len(ids) == len(set(ids)) == COUNT  # each once
        assert set(ids) == {t.id for t in tickets}
        per_publisher = defaultdict(list)
        for item in got:
            per_publisher[item["publisher"]].append(item["data"])
        for who in PUBLISHERS:
            expected = [b"%s %06d" % (who.encode(), i) for i in range(COUNT) if PUBLISHERS[i % len(PUBLISHERS)] == who]
            assert per_publisher[who] == expected, who  # in order, per publisher
        assert [item["seq"] for item in got] == sorted(item["seq"] for item in got)
        assert sub.cursor == COUNT and not sub.gaps
        # the faults happened, both ways
        counts = relay.counts
        assert counts["lost"] > 20 and counts["duplicated"] > 0 and counts["reordered"] > 10, counts
        assert counts["down_forwarded"] > 0 and counts["up_forwarded"] > 0
    finally:
        abc.close()
        xyz.close()
        relay.close()
        scheduler.close()
