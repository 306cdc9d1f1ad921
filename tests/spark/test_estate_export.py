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


def test_an_estates_export_goes_through_the_routed_job(spark, tmp_path: Path) -> None:
    (tmp_path / "estates").mkdir()
    collected = run_and_collect(tmp_path / "estates")
    summary = fcspark.run_jobs(spark, [job for job in all_jobs.JOBS if job.name == "routed"], collected, tmp_path / "report")
    assert summary["jobs"]["routed"]["tables"]["routed"] == 3
    events, _ = fcspark.load_events(spark, collected)
    rows = {r["route"]: r for r in metrics.routed(events)["routed"].collect()}
    assert set(rows) == ROUTES
    for route, row in rows.items():
        # every message landed; not every one is timed yet: send and land are stamped with each house's
        # own tick clock, and between two houses those can disagree (issue 14, item 3, not done)
        assert row["routed"] >= 1 and row["landed"] == row["routed"] and 1 <= row["timed"] <= row["landed"], (route, row)
        assert row["refused"] == 0 and row["lost"] == 0, (route, row)
        assert 0 <= row["p50"] < 5.0, (route, row)
