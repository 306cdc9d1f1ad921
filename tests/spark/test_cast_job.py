"""The cast job on a simulated CAST run's export: per-subscription lag and resync volume, checked two ways.

The run (tests/export/castrun.py) is on the virtual clock, so its events
are the same every time; the job's figures are compared with the same
figures worked out here in plain Python from the rows read back with
pyarrow, and with what the run is known to have done.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import castmetrics
import fcspark
import metrics
from cast import JOB
from flowcast.export import read_segments
from flowcast.export.collect import collect
from flowcast.export.layout import segment_files
from tests.export.castrun import AWAY, FIRST, FRESH, cast_run


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("cast-events")
    run = cast_run(root / "cast", root / "live")
    report = collect([root / "live"], root / "collected")
    assert report.skipped == []
    table, _ = read_segments([p for *_, p in segment_files(root / "collected")])
    return root / "collected", run, [r for r in table.to_pylist() if r["kind"].startswith("cast-")]


def _expected_lags(rows):
    """Seq lag per delivery, the slow way: the highest seq stored at or before it, minus its seq."""
    stored = sorted((r["ts"], r["seq"]) for r in rows if r["kind"] == "cast-stored")
    out = []
    for r in rows:
        if r["kind"] == "cast-delivered":
            high = max(seq for ts, seq in stored if ts <= r["ts"])
            out.append(high - r["seq"])
    return out


def test_cast_job_reports_lag_and_resync_volume_per_subscription(spark, exported, tmp_path: Path) -> None:
    path, run, rows = exported
    summary = fcspark.run_jobs(spark, [JOB], path, tmp_path)
    assert summary["jobs"]["cast"]["tables"] == {"cast_lag": 1, "cast_resync": 1}
    assert "CAST per subscription" in (tmp_path / "index.html").read_text()
    lag = fcspark.read_table(tmp_path, "cast_lag").to_dict("records")[0]
    assert (lag["subscriber"], lag["sub"], lag["publisher"]) == ("xyz/bob", run.sid, "abc")
    assert (lag["delivered"], lag["timed"], lag["last_seq"]) == (FIRST + FRESH, FIRST + FRESH, FIRST + AWAY + FRESH)
    lags = sorted(_expected_lags(rows))
    assert lag["max_seq_lag"] == lags[-1] >= FRESH - 1
    assert lag["p50_seq_lag"] == lags[(len(lags) + 1) // 2 - 1]  # percentile_approx is exact on small inputs
    stored = {r["msg_id"]: r["ts"] for r in rows if r["kind"] == "cast-stored"}
    waits = sorted((r["ts"] - stored[r["msg_id"]]).total_seconds() for r in rows if r["kind"] == "cast-delivered")
    assert lag["max"] == pytest.approx(waits[-1], abs=1e-6) and 0 <= waits[0] <= lag["p50"] <= lag["max"] < 5
    resync = fcspark.read_table(tmp_path, "cast_resync").to_dict("records")[0]
    served = [r for r in rows if r["kind"] == "cast-resync" and r["detail"] == "served"]
    forwarded = [r for r in rows if r["kind"] == "cast-forwarded"]
    assert (resync["publisher"], resync["subscriber"], resync["sub"], resync["pattern"]) == ("abc", "xyz", run.sid, "abc/messages/**")
    assert (resync["resyncs"], resync["resync_seqs"]) == (len(served), sum(r["count"] for r in served))
    assert resync["resyncs"] >= 2 and resync["asked"] == 1
    assert (resync["forwarded"], resync["batches"]) == (sum(r["count"] for r in forwarded), len(forwarded))
    assert (resync["duplicates"], resync["gaps"], resync["gap_seqs"], resync["leases_expired"]) == (FIRST, 1, AWAY, 1)


def test_cast_events_stay_out_of_the_transport_loss_table(spark, exported) -> None:
    events, _ = fcspark.load_events(spark, exported[0])
    assert metrics.loss(events)["loss"].count() == 0  # CAST ids are not hops: no route "None -> None" of them


def test_cast_job_on_data_without_cast_events_gives_empty_tables(spark, demo: Path) -> None:
    events, _ = fcspark.load_events(spark, demo)
    tables = castmetrics.cast(events.filter(~events.kind.startswith("cast-")))
    assert [tables[name].count() for name in ("cast_lag", "cast_resync")] == [0, 0]
