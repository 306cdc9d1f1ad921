"""Reading and ``flowcast export``: damage is counted, future versions refused."""

from __future__ import annotations

import io
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flowcast.export import CorruptSegmentError, Recorder, SchemaVersionError, read_segment, read_segments
from flowcast.export.collect import collect, compact_name, main
from flowcast.export.layout import segment_files
from flowcast.export.progress import Progress
from flowcast.export.schema import SCHEMA, SCHEMA_VERSION, VERSION_KEY

EPOCH = 1_795_305_600.0  # 2026-11-22T00:00:00Z
TODAY = date(2026, 11, 30)


def _write(root: Path, house: str, n: int, start: float = 0.0, segments: int = 1) -> None:
    now = [start]
    rec = Recorder(root, estate="a", house=house, clock=lambda: now[0], epoch=EPOCH, batch=1, max_age=1e9)
    for s in range(segments):
        for i in range(n):
            rec.message("sent", f"{house}-{s}-{i}", "a", "b", i)
            now[0] += 1.0
        rec.rotate()
    rec.close()


def _future(path: Path) -> None:
    table = pq.read_table(path).replace_schema_metadata({VERSION_KEY: str(SCHEMA_VERSION + 1).encode()})
    pq.write_table(table, path)


def test_truncated_and_garbage_files_are_clear_errors(tmp_path: Path) -> None:
    _write(tmp_path, "h", 5)
    (path,) = [p for *_, p in segment_files(tmp_path)]
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptSegmentError, match="not a readable Parquet file"):
        read_segment(path)
    path.write_bytes(b"hello")
    with pytest.raises(CorruptSegmentError):
        read_segment(path)


def test_a_future_schema_version_is_refused_by_name(tmp_path: Path) -> None:
    _write(tmp_path, "h", 5)
    (path,) = [p for *_, p in segment_files(tmp_path)]
    _future(path)
    with pytest.raises(SchemaVersionError, match=f"export schema version {SCHEMA_VERSION + 1} is newer than this flowcast reads"):
        read_segment(path)


def test_foreign_parquet_is_not_mistaken_for_an_export(tmp_path: Path) -> None:
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"a": [1]}), path)
    with pytest.raises(CorruptSegmentError, match="not a flowcast export file"):
        read_segment(path)


def test_an_older_file_missing_optional_columns_reads_as_nulls(tmp_path: Path) -> None:
    _write(tmp_path, "h", 3)
    (path,) = [p for *_, p in segment_files(tmp_path)]
    table = pq.read_table(path).drop_columns(["lag", "remote"])
    pq.write_table(table.replace_schema_metadata(SCHEMA.metadata), path)
    back = read_segment(path)
    assert back.schema == SCHEMA and back.column("lag").null_count == 3


def test_compact_in_place_merges_finished_days_and_counts_damage(tmp_path: Path) -> None:
    _write(tmp_path, "h", 4, segments=3)
    _write(tmp_path, "g", 2, segments=2)
    files = [p for *_, p in segment_files(tmp_path)]
    assert len(files) == 5
    files[-1].write_bytes(b"garbage")  # one of h's three
    report = collect([tmp_path], today=TODAY)
    assert report.segments == 4 and report.events == 4 + 8 and report.removed == 4
    assert len(report.skipped) == 1 and "not a readable Parquet file" in report.skipped[0]
    left = sorted(p.name for *_, p in segment_files(tmp_path))
    assert left == sorted([compact_name(date(2026, 11, 22), "g"), compact_name(date(2026, 11, 22), "h"), files[-1].name])
    again = collect([tmp_path], today=TODAY)  # idempotent
    assert again.written == [] and again.events == 12


def test_today_is_left_alone_in_place_unless_asked(tmp_path: Path) -> None:
    _write(tmp_path, "h", 2, segments=2)
    assert collect([tmp_path], today=date(2026, 11, 22)).segments == 0
    assert collect([tmp_path], today=date(2026, 11, 22), include_today=True).removed == 2


def test_collect_into_out_leaves_sources_and_filters_days(tmp_path: Path) -> None:
    src, out = tmp_path / "src", tmp_path / "out"
    _write(src, "h", 3, segments=2)
    _write(src, "h", 3, start=86_400.0)  # the next day
    report = collect([src], out, since=date(2026, 11, 23))
    assert report.events == 3 and len(report.written) == 1
    assert len(list(segment_files(src))) == 3
    table, _ = read_segments([p for *_, p in segment_files(out)])
    assert table.num_rows == 3


def test_cli_refuses_future_versions_without_writing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path, "h", 2, segments=2)
    first = next(p for *_, p in segment_files(tmp_path))
    _future(first)
    before = sorted(p for *_, p in segment_files(tmp_path))
    assert main([str(tmp_path), "--include-today", "--no-progress"]) == 2
    assert "newer than this flowcast reads" in capsys.readouterr().err
    assert sorted(p for *_, p in segment_files(tmp_path)) == before


def test_cli_summary_and_missing_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path, "h", 2, segments=2)
    assert main([str(tmp_path), "--out", str(tmp_path / "o")]) == 0
    assert "2 segment(s), 4 event(s) -> 1 file(s) written" in capsys.readouterr().out
    assert main([str(tmp_path / "nope")]) == 2
    assert "no such directory" in capsys.readouterr().err


def test_progress_bar_draws_on_long_runs_only() -> None:
    out = io.StringIO()
    bar = Progress(3, "compacting", stream=out, enabled=True, delay=0.0)
    for _ in range(3):
        bar.advance()
    bar.close()
    assert "compacting [" in out.getvalue() and "3/3 (100%" in out.getvalue()
    quiet = io.StringIO()
    bar = Progress(3, "x", stream=quiet, enabled=True, delay=60.0)
    bar.advance()
    bar.close()
    assert quiet.getvalue() == ""


def test_recover_publishes_what_a_crashed_house_left(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.export.test_segments import _crash

    _crash(tmp_path)  # estate a, house h: 20 journaled, 5 lost
    assert segment_files(tmp_path) == []
    assert main([str(tmp_path), "--recover", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "a.h: recovered 20 event(s), lost 5" in out and "1 segment(s), 20 event(s)" in out
    assert main([str(tmp_path), "--recover", "--out", str(tmp_path / "out")]) == 0  # nothing left to recover
    assert "recovered" not in capsys.readouterr().out


def test_a_segment_found_corrupt_while_merging_is_kept_not_deleted(tmp_path: Path) -> None:
    """Footer and version fine, data unusable: skipped, named, and left on disk."""
    _write(tmp_path, "h", 3, segments=2)
    files = [p for *_, p in segment_files(tmp_path)]
    table = pq.read_table(files[0])
    bad = table.set_column(table.column_names.index("latency"), "latency", pa.array(["slow"] * table.num_rows))
    pq.write_table(bad.replace_schema_metadata(table.schema.metadata), files[0])
    report = collect([tmp_path], today=TODAY)
    assert len(report.skipped) == 1 and "latency" in report.skipped[0]
    assert files[0].exists(), "a skipped segment must never be removed"
    assert report.removed == 1 and report.events == 3


def test_day_shaped_folders_that_are_not_days_are_ignored(tmp_path: Path) -> None:
    _write(tmp_path, "h", 2)
    (tmp_path / "2026-13-45" / "h").mkdir(parents=True)
    assert len(segment_files(tmp_path)) == 1
