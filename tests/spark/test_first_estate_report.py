"""docs/first-estate-app.md's last step: ``flowcast spark all`` over the walkthrough's export.

The run (two estates, the doc's commands, ``flowcast export --out``) is
tests/house/test_first_estate.py's :func:`run_first_estate`; here the same
jobs ``flowcast spark all --input ... --output ...`` runs go through the
session's Spark, and the report says what the doc says it does: the
sensor's logged temperature over time first, then each share-to-share route
with every message landed and timed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import all as all_jobs
import fcspark
from tests.house.test_first_estate import READINGS, run_first_estate

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="estates run on Linux")

READING = "temperature/sensor/plant/main -> temperature//control/main"  # plant's sensor house to control's manor, by road
COMMAND = "fan.command/manor/control/main -> fan.command/relay/plant/main"  # control to plant's relay house, through plant's manor
ACK = "fan.ack/relay/plant/main -> fan.ack//control/main"  # and back
FAN = "fan.state/relay/plant/main -> fan.state/sensor/plant/main"  # the relay to the sensor house, by lane


@pytest.fixture(scope="module")
def report(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("first-estate")
    collected = run_first_estate(tmp)
    output = tmp / "examples" / "first-estate" / "run" / "report"  # where the doc's 'flowcast spark all' writes
    summary = fcspark.run_jobs(spark, all_jobs.JOBS, collected, output)
    assert set(summary["jobs"]) == {job.name for job in all_jobs.JOBS} and summary["skipped"] == []
    return output


def test_the_report_shows_the_logged_temperature(report: Path) -> None:
    shares = {(r.estate, r.house, r.share): r for r in fcspark.read_table(report, "shares").itertuples(index=False)}
    assert set(shares) == {("plant", "sensor", "temperature"), ("plant", "relay", "fan.command"), ("control", "manor", "fan.ack")}
    temperature = shares["plant", "sensor", "temperature"]
    assert temperature.updates == READINGS > 1 and temperature.seconds > 0 and temperature.per_second > 0
    assert shares["control", "manor", "fan.ack"].updates == shares["plant", "relay", "fan.command"].updates >= 3
    fields = fcspark.read_table(report, "share_fields")
    (value,) = fields[(fields.share == "temperature") & (fields.field == "value")].itertuples(index=False)
    # the sensor's range: from its first reading, 20.5, up past the alarm threshold and down again
    assert value.samples == READINGS and value.min == 20.5 and 25.0 <= value.max <= 27.0 and value.min < value.mean < value.max
    assert set(fields.share) == {"temperature"}  # the fan's shares hold text: only in last_fields
    series = fcspark.read_table(report, "share_series")
    assert series[series.share == "temperature"].samples.sum() == READINGS
    assert list((report / "plots").glob("share-*plant_sensor_temperature.png"))


def test_the_report_shows_every_route_landed_and_timed(report: Path) -> None:
    rows = {r.route: r for r in fcspark.read_table(report, "routed").itertuples(index=False)}
    assert set(rows) == {READING, COMMAND, ACK, FAN}, set(rows)
    assert rows[READING].routed == READINGS
    assert rows[COMMAND].routed == rows[ACK].routed == rows[FAN].routed >= 3
    for route, row in rows.items():
        assert row.landed == row.routed and row.timed == row.landed and row.skewed == 0, (route, row)
        assert row.refused == 0 and row.lost == 0 and 0 <= row.min <= row.p50 <= row.max < 5.0, (route, row)
    assert fcspark.read_table(report, "routed_refused").empty


def test_the_report_page_leads_with_the_logged_shares(report: Path) -> None:
    page = (report / "index.html").read_text(encoding="utf-8")
    assert "Logged shares" in page and "Routed share to share" in page
    assert page.index("Logged shares") < page.index("Routed share to share") < page.index("Link hops")
    assert "temperature" in page and "fan.ack" in page
