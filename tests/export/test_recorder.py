"""The recorder: what goes in comes out, exactly, in the documented schema."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from flowcast.export import MESSAGE_KINDS, SCHEMA, SCHEMA_VERSION, Recorder, read_segments
from flowcast.export.demo import EPOCH, EXPECTED, run_flow, write_demo
from flowcast.export.layout import ExportNameError, segment_files


def _table(root: Path) -> pa.Table:
    table, skipped = read_segments([p for *_, p in segment_files(root)])
    assert skipped == []
    return table


def test_message_events_round_trip(tmp_path: Path) -> None:
    now = [0.0]
    rec = Recorder(tmp_path, estate="alpha", house="h", clock=lambda: now[0], epoch=EPOCH, batch=7)
    for i, kind in enumerate(MESSAGE_KINDS):
        now[0] = i * 0.5
        rec.message(kind, f"m{i}", ("s", "y", "alpha", ""), "d//beta/c", 10 * i, latency=i / 1000 or None, segment=i)
    rec.presence("beta", "alive")
    rec.close()
    rows = _table(tmp_path).sort_by("stamp").to_pylist()
    assert [r["kind"] for r in rows] == [*MESSAGE_KINDS, "presence"]
    first = rows[1]
    assert first["msg_id"] == "m1" and first["src"] == "s/y/alpha/" and first["dst"] == "d//beta/c"
    assert first["size"] == 10 and first["latency"] == 0.001 and first["segment"] == 1
    assert first["ts"].timestamp() == EPOCH + 0.5
    assert (first["estate"], first["house"], first["schema_version"]) == ("alpha", "h", SCHEMA_VERSION)
    assert rows[-1]["remote"] == "beta" and rows[-1]["detail"] == "alive"


def test_unknown_kind_is_refused(tmp_path: Path) -> None:
    with Recorder(tmp_path, estate="a", house="h", clock=lambda: 0.0, epoch=0.0) as rec:
        with pytest.raises(ValueError, match="unknown message event kind 'lost'"):
            rec.message("lost", "m", "a", "b", 1)


def test_names_that_would_escape_a_path_are_refused(tmp_path: Path) -> None:
    for bad in ("../up", "a/b", "", ".hidden"):
        with pytest.raises(ExportNameError):
            Recorder(tmp_path, estate="a", house=bad, clock=lambda: 0.0, epoch=0.0)


def test_logged_shares_of_a_virtual_house_are_recorded(tmp_path: Path) -> None:
    source = [lambda: 0.0]
    rec = Recorder(tmp_path, estate="alpha", house="demo", clock=lambda: source[0](), epoch=EPOCH)
    run_flow(rec, source)
    rec.close()
    rows = _table(tmp_path).to_pylist()
    assert [(r["stamp"], r["share"], json.loads(r["fields"])) for r in rows] == [
        (0.0, "counter", {"value": 1}),
        (0.25, "counter", {"value": 2}),
        (0.5, "counter", {"value": 3}),
        (0.75, "counter", {"value": 4}),
        (1.0, "counter", {"value": 5}),
        (1.25, "light", {"value": "green"}),
    ]
    assert {r["kind"] for r in rows} == {"share"}


def test_close_stops_watching(tmp_path: Path) -> None:
    from flowcast.store import Store

    store = Store()
    share = store.share("x", {"value": 0})
    rec = Recorder(tmp_path, estate="a", house="h", clock=lambda: 0.0, epoch=0.0)
    rec.watch(share)
    share.value = 1
    rec.close()
    share.value = 2  # no error, no event
    assert share.watchers == []
    assert _table(tmp_path).num_rows == 1


def test_demo_writes_the_expected_events(tmp_path: Path) -> None:
    write_demo(tmp_path)
    table = _table(tmp_path)
    assert table.schema == SCHEMA
    assert table.num_rows == EXPECTED["events"]


def test_flush_by_batch_size_and_by_age(tmp_path: Path) -> None:
    now = [0.0]
    rec = Recorder(tmp_path, estate="a", house="h", clock=lambda: now[0], epoch=0.0, batch=3, flush_every=10.0)
    rec.message("sent", "1", "a", "b", 1)
    rec.message("sent", "2", "a", "b", 1)
    assert rec.pending == 2
    rec.message("sent", "3", "a", "b", 1)
    assert rec.pending == 0 and rec.writer.journaled == 3
    rec.message("sent", "4", "a", "b", 1)
    now[0] = 9.0
    rec.poll()
    assert rec.pending == 1
    now[0] = 10.0
    rec.poll()
    assert rec.pending == 0 and rec.writer.journaled == 4
    rec.close()


def test_ticker_flushes_and_rolls_by_age_on_the_house_scheduler(tmp_path: Path) -> None:
    from flowcast.runtime import Scheduler, VirtualClock
    from flowcast.runtime.scheduler import sleep

    scheduler = Scheduler(VirtualClock())
    clock = scheduler.clock.now
    rec = Recorder(tmp_path, estate="a", house="h", clock=clock, epoch=EPOCH, flush_every=0.5, max_age=2.0)
    seen: list[tuple[float, int, int]] = []

    def traffic():
        for i in range(6):
            rec.message("sent", str(i), "a", "b", 1)
            yield sleep(1.0)
            seen.append((clock(), rec.pending, len(segment_files(tmp_path))))
        rec.close()

    scheduler.spawn(rec.ticker(0.25), name="export-ticker")
    scheduler.spawn(traffic(), name="traffic")
    scheduler.run()
    assert [p for _, p, _ in seen] == [0] * 6  # every event flushed within flush_every
    assert seen[-1][2] >= 2  # and segments rolled by age while the house ran
    table = _table(tmp_path)
    assert sorted(table.column("msg_id").to_pylist()) == [str(i) for i in range(6)]


def test_for_house_stamps_messages_on_the_house_clock(tmp_path: Path) -> None:
    from flowcast.flow.floscript import parse_flo
    from flowcast.house.house import House

    from flowcast.export.demo import DEMO_FLOW

    house = House(parse_flo(DEMO_FLOW).house("demo"), virtual=True, period=0.25, out=lambda line: None)
    rec = Recorder.for_house(house, tmp_path, estate="alpha", epoch=EPOCH)
    house.run(until=10.0)
    rec.message("sent", "after-run", "a", "b", 1)  # at the house's last tick
    rec.close()
    rows = _table(tmp_path).to_pylist()
    assert [r["kind"] for r in rows].count("share") == 6
    sent = next(r for r in rows if r["kind"] == "sent")
    assert sent["stamp"] == house.stamp() >= 1.25 and sent["house"] == "demo"


def test_a_closed_recorder_counts_what_it_is_still_offered_and_raises_nothing(tmp_path: Path) -> None:
    from flowcast.store import Store
    from flowcast.routing import Router

    rec = Recorder(tmp_path, estate="alpha", house="h", clock=lambda: 0.0, epoch=EPOCH)
    store = Store(now=lambda: 0.0)
    inbox = store.queue("inbox")
    router = Router(store, estate="alpha", yard="h")
    router.set_events(rec)
    assert router.send("inbox", 1, src="out")
    rec.close()
    assert router.send("inbox", 2, src="out")  # still hooked: routed and landed, not recorded
    rec.presence("beta", "alive")
    assert [m["data"] for m in inbox.queue] == [1, 2]
    assert rec.after_close == 3
    assert [r["kind"] for r in _table(tmp_path).to_pylist()] == ["routed", "landed"]
