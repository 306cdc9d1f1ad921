"""An estate's run, recorded by ``flowcast run LAYOUT --export DIR``, goes through the Spark jobs with no code.

The run itself (two estates on loopback, SIGTERM, ``flowcast export --out``)
is tests/house/test_estate_export.py's; here the ``routed`` job reads what it
collected: every route, share to share, with each message landed and timed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import all as all_jobs
import fcspark
import metrics
from tests.house.test_estate_export import run_and_collect

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="estates run on Linux")

ROUTES = {
    "ball.out/manor/alpha/main -> ball.in//beta/main",  # ping, alpha's manor to beta's, by road
    "ball.out/manor/beta/main -> ball.back//alpha/main",  # pong, back
    "tick/worker/alpha/main -> ticks.in/manor/alpha/main",  # alpha's worker to its manor, by lane
}


TICKS = "tick/worker/alpha/main -> ticks.in/manor/alpha/main"
#: The worker's router reporting to its own flow that a tick could not be delivered: the manor's lane is
#: not there yet at start, or gone at SIGTERM (the estates' houses start and stop in no fixed order).
UNDELIVERED_REPORT = "ticks.in/worker/alpha/main -> tick/worker/alpha/main"


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_and_collect(tmp_path_factory.mktemp("estates"))


def test_an_estates_export_goes_through_the_routed_job(spark, collected: Path, tmp_path: Path) -> None:
    summary = fcspark.run_jobs(spark, [job for job in all_jobs.JOBS if job.name == "routed"], collected, tmp_path / "report")
    events, _ = fcspark.load_events(spark, collected)
    tables = metrics.routed(events)
    rows = {r["route"]: r for r in tables["routed"].collect()}
    assert summary["jobs"]["routed"]["tables"]["routed"] == len(rows)
    assert ROUTES <= set(rows) <= ROUTES | {UNDELIVERED_REPORT}
    for route, row in rows.items():
        # every message landed (or, a tick at start or stop, was refused as undelivered, and said so) and
        # every landing is timed: send and landing are stamped when they happen, on each house's scheduler
        # clock mapped to the host's wall time, never on the houses' ticks
        refused = row["refused"] if route == TICKS else 0
        assert row["routed"] >= 1 and row["landed"] + refused == row["routed"] and row["timed"] == row["landed"], (route, row)
        assert row["refused"] == refused and row["lost"] == 0 and row["skewed"] == 0, (route, row)
        assert 0 <= row["min"] <= row["p50"] <= row["max"] < 5.0, (route, row)
    assert rows[TICKS]["landed"] >= 1
    reasons = {(r["route"], r["reason"]) for r in tables["routed_refused"].collect()}
    assert reasons <= {(TICKS, "undelivered")}
    assert (UNDELIVERED_REPORT in rows) == bool(reasons)


def test_an_estates_link_hops_are_labelled_with_the_share_routes_they_carry(spark, collected: Path) -> None:
    events, _ = fcspark.load_events(spark, collected)
    hops = metrics.latency(events)["latency"].collect()
    carries = {r["carries"] for r in hops}
    # every link hop that carried routed messages says which share routes: the road both ways, the lane
    assert {"ball.out > ball.in", "ball.out > ball.back", "tick > ticks.in"} <= carries, hops
    for hop in hops:
        assert hop["skewed"] == 0 and hop["timed"] == hop["delivered"] and hop["min"] >= 0, hop
