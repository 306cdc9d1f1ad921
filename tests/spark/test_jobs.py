"""The batch jobs end to end: a known demo in, exact figures and a report out."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import all as all_jobs
import fcspark
import metrics
from flowcast.export.demo import BOB, EPOCH, EXPECTED, FAST_ROUTE, SLOW_ROUTE
from flowcast.export.layout import segment_files
from flowcast.export.schema import SCHEMA_VERSION, VERSION_KEY


def _rows(output: Path, table: str) -> list[dict]:
    return pq.read_table(output / "tables" / table).to_pylist()


@pytest.fixture(scope="module")
def report(spark, demo: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    output = tmp_path_factory.mktemp("report")
    summary = fcspark.run_jobs(spark, all_jobs.JOBS, demo, output)
    return output, summary


def test_every_event_is_read(report) -> None:
    _, summary = report
    assert (summary["events"], summary["files"], summary["skipped"]) == (EXPECTED["events"], 2, [])


def test_each_logged_share_has_its_updates_rate_range_and_values_over_time(report) -> None:
    output, summary = report
    got = {(r["estate"], r["house"], r["share"]): (r["updates"], r["seconds"], r["per_second"], json.loads(r["last_fields"]))
           for r in _rows(output, "shares")}
    assert got == EXPECTED["shares"]
    fields = {(r["estate"], r["house"], r["share"], r["field"]): (r["samples"], r["min"], r["mean"], r["max"], r["last"])
              for r in _rows(output, "share_fields")}
    assert fields == EXPECTED["share_fields"]  # light's "green" is not a number: in shares, not here
    series: dict[tuple, list] = {}
    for r in sorted(_rows(output, "share_series"), key=lambda r: r["at"]):
        at = r["at"].replace(tzinfo=timezone.utc) if r["at"].tzinfo is None else r["at"]
        series.setdefault((r["estate"], r["house"], r["share"], r["field"]), []).append(
            (round(at.timestamp() - EPOCH, 6), r["mean"]))
    assert series == EXPECTED["share_series"]
    assert summary["jobs"]["shares"]["notes"][0] == "2 logged share(s), 6 update(s)"
    assert [p.name for p in (output / "plots").glob("share-*.png")] == ["share-00-alpha_demo_counter.png"]


def test_the_shares_job_is_bounded_and_takes_any_fields(spark, monkeypatch: pytest.MonkeyPatch) -> None:
    """Shares nobody on the team wrote: 15 numeric fields, text, nested values, a bare number, junk; the
    value-over-time table keeps the busiest shares and the most sampled fields, never everything."""
    import sharemetrics

    monkeypatch.setattr(sharemetrics, "SERIES_SHARES", 2)
    at = lambda s: datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=s)  # noqa: E731
    wide = {f"f{i:02d}": i for i in range(15)} | {"label": "x", "nested": {"a": 1}, "flag": True}
    rows = [("wide", at(t), json.dumps(wide)) for t in range(3)]
    rows += [("plain", at(t), json.dumps({"value": t})) for t in range(4)]
    rows += [("odd", at(0), "7"), ("odd", at(1), "not json"), ("odd", at(2), json.dumps([1, 2]))]
    events = spark.createDataFrame(rows, "share string, ts timestamp, fields string")
    events = events.selectExpr("'e' as estate", "'h' as house", "'share' as kind", "*")
    tables = sharemetrics.shares(events)
    summary = {r["share"]: r["updates"] for r in tables["shares"].collect()}
    assert summary == {"wide": 3, "plain": 4, "odd": 3}  # every share counted, whatever its fields
    fields = {(r["share"], r["field"]) for r in tables["share_fields"].collect()}
    assert ("wide", "f14") in fields and ("wide", "label") not in fields and ("wide", "flag") not in fields
    assert not any(share == "odd" for share, _ in fields)
    series = {(r["share"], r["field"]) for r in tables["share_series"].collect()}
    assert {share for share, _ in series} == {"wide", "plain"}  # the 2 busiest with numbers ("odd" has none)
    assert len([f for share, f in series if share == "wide"]) == sharemetrics.SERIES_FIELDS == 12


def test_latency_percentiles_per_route(report) -> None:
    output, _ = report
    got = {r["route"]: (r["delivered"], r["p50"], r["p95"], r["p99"]) for r in _rows(output, "latency")}
    assert set(got) == set(EXPECTED["latency"])
    for route, want in EXPECTED["latency"].items():
        assert got[route] == pytest.approx(want, abs=1e-9), route
    # the slow route's latency was derived from sent/delivered times, to the microsecond
    slow = next(r for r in _rows(output, "latency") if r["route"] == SLOW_ROUTE)
    assert slow["min"] == pytest.approx(0.010, abs=1e-9)


def test_throughput_per_route_per_minute(report) -> None:
    output, _ = report
    zero = datetime.fromtimestamp(EPOCH, tz=timezone.utc)
    got: dict[str, dict[int, int]] = {}
    for r in _rows(output, "throughput"):
        minute = r["minute"].replace(tzinfo=timezone.utc) if r["minute"].tzinfo is None else r["minute"]
        got.setdefault(r["route"], {})[(minute - zero) // timedelta(minutes=1)] = r["messages"]
    assert got == EXPECTED["throughput"]


def test_loss_resend_and_missed_counts(report) -> None:
    output, _ = report
    got = {
        r["route"]: (r["sent"], r["delivered"], r["lost"], r["resent"], r["missed"], r["denied"])
        for r in _rows(output, "loss")
    }
    assert got == EXPECTED["loss"]


def test_causal_lag_per_subscription_topic_and_publisher(report) -> None:
    output, _ = report
    columns = ("delivered", "buffered", "released", "p50_lag", "p95_lag", "max_lag", "rejected", "abandoned")
    got = {(r["subscriber"], r["sub"], r["topic"], r["publisher"]): tuple(r[c] for c in columns) for r in _rows(output, "causal")}
    assert set(got) == set(EXPECTED["causal"])  # the slow route's transport ``buffered`` events are not causal
    for key, want in EXPECTED["causal"].items():
        assert got[key][:3] == want[:3] and got[key][6:] == want[6:], key
        if want[3] is None:
            assert got[key][3:6] == want[3:6], key
        else:
            assert got[key][3:6] == pytest.approx(want[3:6], abs=1e-9), key
    evidence = {
        (r["observer"], r["topic"], r["publisher"], r["kind"], r["reason"]): (r["messages"], r["events"])
        for r in _rows(output, "causal_evidence")
    }
    assert evidence == EXPECTED["causal_evidence"]
    fetch = {(r["relay"], r["topic"], r["source"]): (r["fetched"], r["p50_wait"], r["p95_wait"], r["max_wait"])
             for r in _rows(output, "causal_fetch")}
    assert fetch == EXPECTED["causal_fetch"]
    index = (output / "index.html").read_text()
    assert "Causal delivery per topic and publisher" in index
    assert all(f"tables/{t}" in index for t in ("causal", "causal_evidence", "causal_fetch"))
    assert "18 delivered, 7 buffered first, 1 rejected, 1 abandoned" in index
    assert f"longest wait 3 s: topic chat, publisher {BOB[:16]}..., at beta/main (log)" in index


def test_presence_timeline(report) -> None:
    output, _ = report
    zero = datetime.fromtimestamp(EPOCH, tz=timezone.utc).replace(tzinfo=None)

    def offset(t):
        return None if t is None else (t.replace(tzinfo=None) - zero).total_seconds()

    rows = sorted(_rows(output, "presence"), key=lambda r: r["since"])
    assert [(r["remote"], r["status"], offset(r["since"]), offset(r["until"])) for r in rows] == EXPECTED["presence"]
    assert {r["observer"] for r in rows} == {"alpha"}


def test_routed_share_to_share_per_route(report) -> None:
    output, _ = report
    got = {
        r["route"]: tuple(r[k] for k in ("routed", "landed", "refused", "lost", "timed", "p50", "p95", "p99", "max"))
        for r in _rows(output, "routed")
    }
    assert set(got) == set(EXPECTED["routed"])
    for route, want in EXPECTED["routed"].items():
        assert got[route][:5] == want[:5], route
        if want[5] is None:
            assert got[route][5:] == want[5:], route
        else:
            assert got[route][5:] == pytest.approx(want[5:], abs=1e-9), route
    refused = {(r["route"], r["reason"]): r["count"] for r in _rows(output, "routed_refused")}
    assert refused == EXPECTED["routed_refused"]


def test_cast_lag_and_resync_per_subscription(report) -> None:
    output, _ = report
    lag = {(r["subscriber"], r["sub"], r["publisher"]): r for r in _rows(output, "cast_lag")}
    assert set(lag) == set(EXPECTED["cast_lag"])
    for key, want in EXPECTED["cast_lag"].items():
        got = tuple(lag[key][k] for k in ("delivered", "last_seq", "timed", "p50", "p99", "max", "p50_seq_lag", "p99_seq_lag", "max_seq_lag"))
        assert got[:3] == want[:3] and got[6:] == want[6:], key
        assert got[3:6] == pytest.approx(want[3:6], abs=1e-6), key
    resync = {(r["publisher"], r["subscriber"], r["sub"]): r for r in _rows(output, "cast_resync")}
    columns = ("pattern", "resyncs", "resync_seqs", "asked", "forwarded", "batches", "duplicates", "gaps", "gap_seqs", "leases_expired")
    assert {key: tuple(r[k] for k in columns) for key, r in resync.items()} == EXPECTED["cast_resync"]
    index = (output / "index.html").read_text()
    assert "CAST per subscription" in index and "tables/cast_lag" in index and "tables/cast_resync" in index


def test_report_links_every_plot(report) -> None:
    output, _ = report
    index = (output / "index.html").read_text()
    plots = sorted(p.name for p in (output / "plots").glob("*.png"))
    assert len([p for p in plots if p.startswith("latency-")]) == 2
    assert "throughput.png" in plots and "presence.png" in plots
    for png in plots:
        assert f"plots/{png}" in index
        assert (output / "plots" / png).read_bytes().startswith(b"\x89PNG")
    assert FAST_ROUTE.replace(">", "&gt;") in index


def test_a_clock_skew_between_two_hosts_is_counted_never_shown_as_a_negative_latency(spark) -> None:
    """Two estates on two hosts whose wall clocks disagree by 50 ms: a landing can be stamped before
    its routing, a delivery before its sending.  Neither becomes a negative (or zero) latency."""
    from pyspark.sql import Row
    from pyspark.sql import functions as F

    at = lambda ms: datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=ms)  # noqa: E731
    rows = [
        Row(kind="routed", src="a/w/alpha/c", dst="b/w/beta/c", msg_id="1.0:0", ts=at(100), latency=None),
        Row(kind="landed", src="a/w/alpha/c", dst="b/w/beta/c", msg_id="1.0:0", ts=at(60), latency=None),  # 40 ms "early"
        Row(kind="routed", src="a/w/alpha/c", dst="b/w/beta/c", msg_id="2.0:0", ts=at(200), latency=None),
        Row(kind="landed", src="a/w/alpha/c", dst="b/w/beta/c", msg_id="2.0:0", ts=at(203), latency=None),
        Row(kind="sent", src="/w/alpha/1", dst="/w/beta/1", msg_id="t:1:1", ts=at(300), latency=None),
        Row(kind="delivered", src="/w/alpha/1", dst="/w/beta/1", msg_id="t:1:1", ts=at(290), latency=None),
        Row(kind="sent", src="/w/alpha/1", dst="/w/beta/1", msg_id="t:1:2", ts=at(400), latency=None),
        Row(kind="delivered", src="/w/alpha/1", dst="/w/beta/1", msg_id="t:1:2", ts=at(402), latency=None),
    ]
    events = spark.createDataFrame(rows, "kind string, src string, dst string, msg_id string, ts timestamp, latency double")
    events = events.withColumn("detail", F.lit(None).cast("string"))
    routed = metrics.routed(events)["routed"].first()
    assert (routed["landed"], routed["timed"], routed["skewed"]) == (2, 1, 1)
    assert routed["min"] == pytest.approx(0.003) and routed["max"] == pytest.approx(0.003)
    hop = metrics.latency(events)["latency"].first()
    assert (hop["delivered"], hop["timed"], hop["skewed"]) == (2, 1, 1)
    assert hop["min"] == pytest.approx(0.002) and hop["p50"] == pytest.approx(0.002)


def test_jobs_handle_absent_causal_columns(spark) -> None:
    from pyspark.sql import Row

    events = spark.createDataFrame(
        [Row(kind="delivered", src="a", dst="b", ts=datetime(2026, 1, 1), msg_id="m", latency=0.1)]
    )
    assert not {"lag", "topic", "publisher", "estate"} & set(events.columns)
    tables = metrics.causal(events)
    assert {name: df.count() for name, df in tables.items()} == {"causal": 0, "causal_evidence": 0, "causal_fetch": 0}


def test_corrupt_and_truncated_files_are_counted_skips(spark, demo: Path, tmp_path: Path) -> None:
    root = tmp_path / "in"
    shutil.copytree(demo, root)
    alpha, beta = [p for *_, p in segment_files(root)]
    (alpha.parent / "garbage.parquet").write_bytes(b"not parquet at all")
    data = beta.read_bytes()
    beta.write_bytes(data[: len(data) // 2])
    summary = fcspark.run_jobs(spark, [all_jobs.loss.JOB], root, tmp_path / "out")
    assert summary["files"] == 1 and len(summary["skipped"]) == 2
    assert all("not a readable Parquet file" in s for s in summary["skipped"])
    loss = {r["route"]: r["sent"] for r in _rows(tmp_path / "out", "loss")}
    assert loss == {FAST_ROUTE: 100, SLOW_ROUTE: 20}  # alpha's segment still counted
    assert "2 file(s) skipped" in (tmp_path / "out" / "index.html").read_text()


def test_a_future_schema_version_stops_the_job_clearly(spark, demo: Path, tmp_path: Path) -> None:
    root = tmp_path / "in"
    shutil.copytree(demo, root)
    path = next(p for *_, p in segment_files(root))
    pq.write_table(pq.read_table(path).replace_schema_metadata({VERSION_KEY: b"9"}), path)
    with pytest.raises(fcspark.JobError, match="export schema version 9 is newer than this flowcast reads"):
        fcspark.run_jobs(spark, [all_jobs.loss.JOB], root, tmp_path / "out")


def test_flowcast_spark_cli_runs_a_job(spark, demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from flowcast.export import sparkcli

    out = tmp_path / "out"
    assert sparkcli.main(["latency", "--input", str(demo), "--output", str(out), "--local-dir", str(tmp_path / "l")]) == 0
    assert f"latency: {EXPECTED['events']} events from 2 file(s)" in capsys.readouterr().out
    assert {r["route"] for r in _rows(out, "latency")} == {FAST_ROUTE, SLOW_ROUTE}
    assert not spark.sparkContext._jsc.sc().isStopped()  # the caller's session is left running


def test_cluster_urls_are_read_as_given_and_versions_checked_in_rows(
    spark, demo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fcspark, "_local_path", lambda _input: None)  # as for hdfs:// or s3a://
    events, info = fcspark.load_events(spark, str(demo))
    assert info.events is None and events.count() == EXPECTED["events"]
    root = tmp_path / "in"
    shutil.copytree(demo, root)
    path = next(p for *_, p in segment_files(root))
    table = pq.read_table(path)
    version = pa.array([SCHEMA_VERSION + 1] * table.num_rows, pa.int16())
    pq.write_table(table.set_column(0, table.schema.field(0), version), path)
    with pytest.raises(fcspark.JobError, match=f"export schema version {SCHEMA_VERSION + 1} is newer than this flowcast reads"):
        fcspark.load_events(spark, str(root))


def test_empty_and_missing_inputs_never_crash(spark, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from flowcast.export import sparkcli

    empty = tmp_path / "empty"
    empty.mkdir()
    summary = fcspark.run_jobs(spark, all_jobs.JOBS, empty, tmp_path / "out")
    assert summary["events"] == 0 and summary["files"] == 0
    assert all(rows == 0 for job in summary["jobs"].values() for rows in job["tables"].values())
    assert summary["jobs"]["latency"]["notes"] == ["no delivered messages"]
    assert "no presence changes recorded" in (tmp_path / "out" / "index.html").read_text()
    assert sparkcli.main(["loss", "--input", str(tmp_path / "nope"), "--output", str(tmp_path / "o")]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_causal_job_on_a_real_causal_run_matches_its_rows(spark, tmp_path: Path) -> None:
    """The causal job over a simulated CausalService's export (tests/export/causalrun.py), checked against the rows."""
    from flowcast.export import read_segments
    from flowcast.export.collect import collect
    from tests.export.causalrun import causal_run

    run = causal_run(tmp_path / "causal", tmp_path / "live")
    assert collect([tmp_path / "live"], tmp_path / "in").skipped == []
    rows = [r for r in read_segments(run.paths)[0].to_pylist() if r["kind"].startswith("causal-")]
    summary = fcspark.run_jobs(spark, [all_jobs.causal.JOB], tmp_path / "in", tmp_path / "out")
    assert summary["jobs"]["causal"]["tables"] == {"causal": 2, "causal_evidence": 3, "causal_fetch": 1}
    table = {r["publisher"]: r for r in _rows(tmp_path / "out", "causal")}
    lag = next(r["lag"] for r in rows if r["kind"] == "causal-delivered" and r["msg_id"] == run.second.hash.hex())
    alpha, gamma = table[run.alpha], table[run.gamma]
    assert (alpha["subscriber"], alpha["sub"], alpha["topic"]) == ("gamma/manor", run.sub.name, "log")
    assert (alpha["delivered"], alpha["buffered"], alpha["released"], alpha["rejected"], alpha["abandoned"]) == (4, 1, 1, 1, 0)
    assert alpha["p50_lag"] == alpha["p95_lag"] == alpha["max_lag"] == pytest.approx(lag, abs=1e-9)
    assert (gamma["delivered"], gamma["buffered"], gamma["released"], gamma["rejected"], gamma["abandoned"]) == (0, 1, 0, 0, 1)
    assert gamma["max_lag"] is None  # never released: no lag to report
    evidence = {(r["publisher"], r["kind"], r["reason"]): r["messages"] for r in _rows(tmp_path / "out", "causal_evidence")}
    assert evidence == {(run.alpha, "rejected", "rude"): 1, (run.alpha, "equivocation", None): 1, (run.gamma, "abandoned", None): 1}
    (fetch,) = _rows(tmp_path / "out", "causal_fetch")
    waited = next(r["latency"] for r in rows if r["kind"] == "causal-fetched")
    assert (fetch["relay"], fetch["source"], fetch["fetched"]) == ("gamma/manor", "alpha", 1)
    assert fetch["max_wait"] == pytest.approx(waited, abs=1e-9)
