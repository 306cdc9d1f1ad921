"""One simulated CAST run with a Recorder at each end: every kind of cast event, known counts.

abc's manor publishes, xyz's bob subscribes (tests/cast/kit.py), on the
virtual clock, so the export is the same every run.  Shared by the export
test (the rows) and the Spark test (the cast job's figures).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from flowcast.export.demo import EPOCH
from flowcast.export.recorder import Recorder
from tests.cast.kit import Cast

RETENTION = 120.0  # seconds, not a day: the same path with fewer renews sent into the partition
FIRST, AWAY, FRESH = 10, 20, 5
SUB_HOUSE = ("xyz", "bob")


def _ports(estate: str) -> list[str]:
    return [f"{estate}/{yard}" for yard in ("manor", "bob", "carol", "w1")] + [f"{estate}:main"]


def cast_run(tmp: Path, live: Path) -> SimpleNamespace:
    """Publish, deliver, resend from an old cursor (duplicates), lose the lease, expire a range (gap), resume."""
    cast = Cast(tmp, retention=RETENTION)
    svc = cast.service()
    publishing = Recorder(live, estate="abc", house="manor", clock=cast.clock, epoch=EPOCH, batch=8)
    publishing.watch_cast(cast.pub)
    subscribing = Recorder(live, estate="xyz", house="bob", clock=cast.clock, epoch=EPOCH, batch=8)
    # the path a house takes: watch_house finds the service in the house's cast slot
    subscribing.watch_house(SimpleNamespace(logged=[], store=None, cast=svc))
    sub = svc.subscribe("abc/messages/**", estate="abc", into="inbox", lease=6.0)
    cast.publish_many(FIRST)
    assert cast.run_until(lambda: sub.cursor == FIRST, 10)
    cast.world.run_for(1.5)
    sub.cursor = 0  # as if the inbox had lost its cursor but kept its ids: all of it comes again, none delivered
    svc.subscriber._resync(sub)
    assert cast.run_until(lambda: sub.cursor == FIRST and sub.duplicates == FIRST, 10)
    cast.world.run_for(1.5)  # the tick reports the cursor: the publisher has heard 10
    publisher = cast.pub.publisher
    cast.world.net.partition(_ports("abc"), _ports("xyz"))  # renews do not arrive: the lease lapses
    assert cast.run_until(lambda: publisher.counts["lease_expired"] == 1, 20)
    cast.publish_many(AWAY, prefix="abc/messages/away")
    cast.world.run_for(2 * RETENTION)  # past retention and an expiry pass (every 60 s): what xyz missed is gone
    cast.world.net.heal()
    cast.publish_many(FRESH, prefix="abc/messages/fresh")
    assert cast.run_until(lambda: sub.cursor == FIRST + AWAY + FRESH, 30)
    cast.world.run_for(5)
    assert sub.gaps == [(FIRST + 1, FIRST + AWAY)] and sub.delivered == FIRST + FRESH
    publishing.close()
    subscribing.close()
    return SimpleNamespace(cast=cast, sub=sub, sid=sub.sid.hex())
