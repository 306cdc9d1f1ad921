"""CAST's cache and delivery events reach the Parquet export and read back (docs/export.md)."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest

from flowcast.export import read_segments
from flowcast.export.layout import segment_files
from flowcast.export.recorder import Recorder
from flowcast.export.schema import CAST_KINDS, SCHEMA_VERSION
from tests.export.castrun import AWAY, FIRST, FRESH, cast_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("castrun")
    info = cast_run(tmp / "cast", tmp / "live")
    table, skipped = read_segments([path for _, _, path in segment_files(tmp / "live")])
    assert skipped == []
    info.rows = [r for r in table.to_pylist() if r["kind"].startswith("cast-")]
    return info


def _of(rows, kind, **match):
    return [r for r in rows if r["kind"] == kind and all(r[k] == v for k, v in match.items())]


def test_every_cast_event_kind_is_recorded_at_the_end_that_saw_it(run):
    where = {(r["estate"], r["kind"]) for r in run.rows}
    assert {k for _, k in where} == set(CAST_KINDS)
    for estate, kind in where:  # the publisher's events at abc, the subscriber's at xyz (gap and resync at both)
        assert estate == ("xyz" if kind in ("cast-delivered", "cast-duplicate") else estate)
        assert estate == ("abc" if kind in ("cast-stored", "cast-forwarded", "cast-lease-expired") else estate)
    assert all(r["schema_version"] == SCHEMA_VERSION >= 2 for r in run.rows)


def test_stored_and_delivered_carry_the_message_and_join_by_id(run):
    stored = _of(run.rows, "cast-stored", estate="abc")
    delivered = _of(run.rows, "cast-delivered", estate="xyz")
    assert [r["seq"] for r in stored] == list(range(1, FIRST + AWAY + FRESH + 1))
    assert len(delivered) == FIRST + FRESH
    by_id = {r["msg_id"]: r for r in stored}
    for r in delivered:
        assert r["sub"] == run.sid and r["remote"] == "abc"
        assert by_id[r["msg_id"]]["seq"] == r["seq"] and by_id[r["msg_id"]]["name"] == r["name"]
        assert r["latency"] is not None and 0 <= r["latency"] < 5  # virtual seconds, publish stamp to the queue
        assert r["ts"] >= by_id[r["msg_id"]]["ts"] and r["size"] == 7  # b"m000000"
    assert [r["seq"] for r in delivered] == list(range(1, FIRST + 1)) + list(range(FIRST + AWAY + 1, FIRST + AWAY + FRESH + 1))


def test_duplicates_resyncs_gaps_and_the_lapsed_lease_say_which_subscription_and_range(run):
    rows = run.rows
    dupes = _of(rows, "cast-duplicate")
    assert len(dupes) == FIRST and {r["sub"] for r in dupes} == {run.sid}
    assert sorted(r["seq"] for r in dupes) == list(range(1, FIRST + 1))
    asked = _of(rows, "cast-resync", detail="asked")
    assert asked and asked[0]["seq"] == 1 and asked[0]["estate"] == "xyz"
    served = _of(rows, "cast-resync", detail="served")
    # the rewound cursor (0 of 10), then the return after the lease lapsed (10 of 35)
    assert (1, FIRST, FIRST) in {(r["seq"], r["upto"], r["count"]) for r in served}
    assert (FIRST + 1, FIRST + AWAY + FRESH, AWAY + FRESH) in {(r["seq"], r["upto"], r["count"]) for r in served}
    assert all(r["remote"] == "xyz" and r["sub"] == run.sid and r["name"] == "abc/messages/**" for r in served)
    gaps = {(r["detail"], r["seq"], r["upto"], r["count"]) for r in _of(rows, "cast-gap")}
    assert gaps == {("sent", FIRST + 1, FIRST + AWAY, AWAY), ("delivered", FIRST + 1, FIRST + AWAY, AWAY)}
    (lapsed,) = _of(rows, "cast-lease-expired")
    assert (lapsed["remote"], lapsed["sub"], lapsed["seq"]) == ("xyz", run.sid, FIRST)
    forwarded = _of(rows, "cast-forwarded")
    ranges = Counter((r["seq"], r["upto"], r["count"]) for r in forwarded)
    # the first ten twice (the rewound cursor sends them again), then only what the gap left: never 11..30
    assert set(ranges) == {(1, FIRST, FIRST), (FIRST + AWAY + 1, FIRST + AWAY + FRESH, FRESH)}
    assert ranges[(1, FIRST, FIRST)] == 2
    assert all(r["size"] > 0 and r["remote"] == "xyz" for r in forwarded)


def test_a_recorder_refuses_an_unknown_cast_kind_and_detaches_from_the_service_on_close(tmp_path):
    from tests.cast.kit import Cast

    cast = Cast(tmp_path / "c")
    recorder = Recorder(tmp_path / "live", estate="abc", house="manor", clock=cast.clock)
    with pytest.raises(ValueError, match="unknown CAST event kind"):
        recorder.cast("cast-bogus", None, None)
    recorder.watch_cast(cast.pub)
    hooks = cast.pub.publisher.hooks
    assert hooks.stored is not None
    recorder.close()
    assert all(getattr(hooks, name) is None for name in hooks.names)
    cast.publish_many(3)  # nothing hears it, nothing fails
    assert recorder.after_close == 0


def test_a_version_1_segment_still_reads_with_the_cast_columns_as_nulls(tmp_path):
    """Version 2 only added columns and kinds: files written before it read as they were."""
    import pyarrow.parquet as pq

    from flowcast.export.schema import SCHEMA, VERSION_KEY

    recorder = Recorder(tmp_path, estate="alpha", house="h", clock=lambda: 1.0)
    recorder.message("sent", "m1", "a", "b", 3)
    (path,) = recorder.close()
    old = pq.read_table(path).drop_columns(["seq", "upto", "count", "sub", "name"])
    old = old.set_column(0, "schema_version", pa.array([1], pa.int16()))
    pq.write_table(old.replace_schema_metadata({VERSION_KEY: b"1"}), path)
    (row,) = read_segments([path])[0].to_pylist()
    assert (row["schema_version"], row["kind"], row["msg_id"]) == (1, "sent", "m1")
    assert [row[c] for c in ("seq", "upto", "count", "sub", "name")] == [None] * 5
    assert read_segments([path])[0].schema == SCHEMA


def test_a_listener_that_raises_is_removed_and_cast_goes_on(tmp_path):
    from tests.cast.kit import Cast

    cast = Cast(tmp_path / "c")
    hooks = cast.pub.publisher.hooks

    def boom(ticket):
        raise RuntimeError("a recorder's bug")

    hooks.add("stored", boom)
    tickets = cast.publish_many(3)  # every publish still acknowledged
    assert all(t.ok for t in tickets) and hooks.stored is None


def test_a_service_given_to_the_house_after_the_recorder_exists_is_followed_once(tmp_path):
    """``flowcast run --export`` makes its recorder before a flow or user code may attach a CastService."""
    from types import SimpleNamespace

    from tests.cast.kit import Cast

    cast = Cast(tmp_path / "c")
    recorder = Recorder(tmp_path / "live", estate="abc", house="manor", clock=cast.clock)
    house = SimpleNamespace(cast=None)
    chore = recorder.follow_cast(house)
    chore()
    assert cast.pub.publisher.hooks.stored is None
    house.cast = cast.pub
    chore()
    chore()  # one watch, not one a tick
    assert len(cast.pub.publisher.hooks.listeners("stored")) == 1
    recorder.close()
    assert cast.pub.publisher.hooks.stored is None
