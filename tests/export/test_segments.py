"""Segments: bounded, never visible torn, and a crash loses only what it must."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flowcast.export import Recorder, read_segments
from flowcast.export.layout import journal_dir, segment_files

DAY = 86_400.0
EPOCH = 1_795_305_600.0  # a UTC midnight


def _segments(root: Path) -> list[Path]:
    return [p for *_, p in segment_files(root)]


def test_segments_roll_by_age_in_event_time(tmp_path: Path) -> None:
    now = [0.0]
    rec = Recorder(tmp_path, estate="a", house="h", clock=lambda: now[0], epoch=EPOCH, batch=1, max_age=10.0)
    for t in range(30):
        now[0] = float(t)
        rec.message("sent", str(t), "a", "b", 1)
    rec.close()
    files = _segments(tmp_path)
    assert [pq.read_metadata(p).num_rows for p in files] == [11, 11, 8]


def test_segments_roll_by_size(tmp_path: Path) -> None:
    rec = Recorder(tmp_path, estate="a", house="h", clock=lambda: 0.0, epoch=EPOCH, batch=100, max_bytes=20_000)
    for i in range(2_000):
        rec.message("sent", f"message-{i}", "a", "b", i)
    rec.close()
    files = _segments(tmp_path)
    assert len(files) > 2
    table, _ = read_segments(files)
    assert table.num_rows == 2_000 and len(set(table.column("msg_id").to_pylist())) == 2_000


def test_a_segment_spanning_midnight_is_split_by_day(tmp_path: Path) -> None:
    now = [DAY - 1.0]
    rec = Recorder(tmp_path, estate="a", house="h", clock=lambda: now[0], epoch=EPOCH, batch=10)
    rec.message("sent", "before", "a", "b", 1)
    now[0] = DAY + 1.0
    rec.message("sent", "after", "a", "b", 1)
    rec.close()
    days = [(d.isoformat(), pq.read_table(p).column("msg_id").to_pylist()) for d, _, p in segment_files(tmp_path)]
    assert days == [("2026-11-22", ["before"]), ("2026-11-23", ["after"])]


def test_nothing_visible_while_open_and_no_hidden_leftovers_after_close(tmp_path: Path) -> None:
    rec = Recorder(tmp_path, estate="a", house="h", clock=lambda: 0.0, epoch=EPOCH, batch=1)
    rec.message("sent", "1", "a", "b", 1)
    assert _segments(tmp_path) == []  # journaled, not published
    rec.close()
    assert len(_segments(tmp_path)) == 1
    assert list(journal_dir(tmp_path, "a", "h").iterdir()) == []
    hidden = [p for p in tmp_path.rglob(".*") if p.is_file()]
    assert hidden == []


CRASHER = textwrap.dedent(
    """
    import os, signal, sys
    from flowcast.export import Recorder
    rec = Recorder(sys.argv[1], estate="a", house="h", clock=lambda: 0.0, epoch={epoch}, batch=10)
    for i in range(25):
        rec.message("sent", str(i), "a", "b", 1)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def _crash(root: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", CRASHER.format(epoch=EPOCH), str(root)], timeout=60)
    assert proc.returncode == -signal.SIGKILL


def test_kill_9_loses_only_unflushed_events_and_says_how_many(tmp_path: Path) -> None:
    _crash(tmp_path)
    assert _segments(tmp_path) == []
    lines: list[str] = []
    rec = Recorder(tmp_path, estate="a", house="h", clock=lambda: 0.0, epoch=EPOCH, out=lines.append)
    assert (rec.recovery.recovered, rec.recovery.lost) == (20, 5)
    assert lines == ["export: recovered 20 event(s) from an interrupted segment, lost 5 unflushed event(s)"]
    rec.close()
    table, _ = read_segments(_segments(tmp_path))
    assert sorted(int(x) for x in table.column("msg_id").to_pylist()) == list(range(20))


def test_a_torn_journal_tail_is_counted_as_lost(tmp_path: Path) -> None:
    _crash(tmp_path)
    (journal,) = journal_dir(tmp_path, "a", "h").glob("*.journal")
    data = journal.read_bytes()
    journal.write_bytes(data[:-40])  # tear the second batch
    rec = Recorder(tmp_path, estate="a", house="h", clock=lambda: 0.0, epoch=EPOCH)
    assert (rec.recovery.recovered, rec.recovery.lost) == (10, 15)
    rec.close()


def test_recovery_is_idempotent_after_a_crash_mid_publish(tmp_path: Path) -> None:
    _crash(tmp_path)
    jdir = journal_dir(tmp_path, "a", "h")
    saved = {p.name: p.read_bytes() for p in jdir.iterdir()}
    Recorder(tmp_path, estate="a", house="h", clock=lambda: 0.0, epoch=EPOCH).close()
    for name, data in saved.items():  # as if killed after the rename, before the unlink
        (jdir / name).write_bytes(data)
    rec = Recorder(tmp_path, estate="a", house="h", clock=lambda: 0.0, epoch=EPOCH)
    rec.close()
    table, _ = read_segments(_segments(tmp_path))
    assert table.num_rows == 20


def test_a_clean_start_reports_nothing(tmp_path: Path) -> None:
    lines: list[str] = []
    rec = Recorder(tmp_path, estate="a", house="h", clock=lambda: 0.0, epoch=EPOCH, out=lines.append)
    assert lines == [] and (rec.recovery.recovered, rec.recovery.lost) == (0, 0)
    rec.close()
    assert not os.listdir(journal_dir(tmp_path, "a", "h"))


def test_kill_9_after_segments_rolled_recovers_only_the_open_one(tmp_path: Path) -> None:
    script = CRASHER.replace("batch=10)", "batch=10, max_age=1.0)").replace(
        'rec.message("sent", str(i), "a", "b", 1)', 'rec._now = lambda i=i: float(i); rec.message("sent", str(i), "a", "b", 1)'
    )
    proc = subprocess.run([sys.executable, "-c", script.format(epoch=EPOCH), str(tmp_path)], timeout=60)
    assert proc.returncode == -signal.SIGKILL
    published = _segments(tmp_path)
    before, _ = read_segments(published)
    rec = Recorder(tmp_path, estate="a", house="h", clock=lambda: 0.0, epoch=EPOCH)
    rec.close()
    after, _ = read_segments(_segments(tmp_path))
    assert len(published) > 1 and before.num_rows > 0  # segments did roll before the kill
    # rolled segments were already published; the crash cost exactly the recorder's unflushed events
    assert before.num_rows + rec.recovery.recovered == after.num_rows
    assert after.num_rows + rec.recovery.lost == 25
    assert sorted(int(x) for x in after.column("msg_id").to_pylist()) == list(range(after.num_rows))


def test_a_second_writer_for_the_same_house_is_refused_and_recover_leaves_a_live_journal(tmp_path):
    from flowcast.export.collect import recover
    from flowcast.export.segments import SegmentWriter, WriterBusyError

    first = SegmentWriter(tmp_path, "a", "h", epoch=0.0)
    with pytest.raises(WriterBusyError, match="another writer"):
        SegmentWriter(tmp_path, "a", "h", epoch=0.0)
    journals = sorted(p.name for p in first.jdir.iterdir())
    assert recover([tmp_path]) == []  # the running house's journal is not "recovered" away
    assert sorted(p.name for p in first.jdir.iterdir()) == journals
    first.close()
    SegmentWriter(tmp_path, "a", "h", epoch=0.0).close()  # free again once closed


def test_a_journal_left_by_schema_version_1_is_recovered_not_counted_lost(tmp_path: Path) -> None:
    """A house killed, then started again by a flowcast that writes version 2: its journal is still read."""
    _crash(tmp_path)
    (journal,) = journal_dir(tmp_path, "a", "h").glob("*.journal")
    with pa.OSFile(str(journal), "rb") as f:
        table = pa.ipc.open_stream(f).read_all()
    old = table.drop_columns(["seq", "upto", "count", "sub", "name"])
    old = old.set_column(0, "schema_version", pa.array([1] * old.num_rows, pa.int16()))
    with pa.OSFile(str(journal), "wb") as f, pa.ipc.new_stream(f, old.schema) as writer:
        for batch in old.to_batches(max_chunksize=10):
            writer.write_batch(batch)
    rec = Recorder(tmp_path, estate="a", house="h", clock=lambda: 0.0, epoch=EPOCH)
    assert (rec.recovery.recovered, rec.recovery.lost) == (20, 5)
    rec.close()
    rows, _ = read_segments(_segments(tmp_path))
    assert sorted(int(x) for x in rows.column("msg_id").to_pylist()) == list(range(20))
    assert set(rows.column("schema_version").to_pylist()) == {1} and rows.column("seq").null_count == 20
