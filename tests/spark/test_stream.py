"""The streaming job follows a live export directory as segments appear."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow.parquet as pq

import stream_latency
from flowcast.export import Recorder

EPOCH = 1_795_305_600.0
ROUTE = "a/h/alpha/ -> b/h/beta/"


def _segment(root: Path, house: str, latencies: list[float], start: float) -> None:
    """Publish one segment of delivered events with the given latencies."""
    now = [start]
    with Recorder(root, estate="beta", house=house, clock=lambda: now[0], epoch=EPOCH) as rec:
        for i, latency in enumerate(latencies):
            now[0] = start + i
            rec.message("delivered", f"{house}-{start}-{i}", "a/h/alpha/", "b/h/beta/", 10, latency)
            rec.message("sent", f"{house}-{start}-{i}", "a/h/alpha/", "b/h/beta/", 10)  # ignored by the stream


def _table(output: Path) -> dict | None:
    path = output / stream_latency.TABLE
    if not path.exists():
        return None
    rows = pq.read_table(path).to_pylist()
    return {r["route"]: r for r in rows}


def test_stream_updates_the_latency_table_as_segments_appear(spark, tmp_path: Path) -> None:
    live, output = tmp_path / "live", tmp_path / "out"
    live.mkdir()
    query = stream_latency.start(spark, live, output, trigger=0.2)
    try:
        _segment(live, "h1", [0.001 * (i + 1) for i in range(10)], start=0.0)
        query.processAllAvailable()
        first = _table(output)
        assert first is not None and first[ROUTE]["delivered"] == 10
        assert first[ROUTE]["p50"] == 0.005 and first[ROUTE]["max"] == 0.010

        # a second house, a later day (a new directory), and a corrupt file that must not stop it
        _segment(live, "h2", [0.5] * 10, start=86_400.0)
        (live / "2026-11-22" / "h1" / "junk.parquet").write_bytes(b"torn")
        deadline = time.monotonic() + 60
        table = _table(output)
        while (table is None or table[ROUTE]["delivered"] != 20) and time.monotonic() < deadline:
            query.processAllAvailable()
            table = _table(output)
        assert table[ROUTE]["delivered"] == 20
        assert table[ROUTE]["max"] == 0.5 and table[ROUTE]["p50"] == 0.010
        assert query.exception() is None and query.isActive
    finally:
        query.stop()


def test_stream_stops_clearly_on_a_future_schema_version(spark, tmp_path: Path) -> None:
    import pyarrow.compute as pc
    import pytest
    from pyspark.errors import StreamingQueryException

    from flowcast.export.layout import segment_files
    from flowcast.export.schema import SCHEMA, SCHEMA_VERSION, VERSION_KEY

    live, output = tmp_path / "live", tmp_path / "out"
    live.mkdir()
    _segment(live, "h1", [0.001, 0.002], start=0.0)
    (path,) = [p for *_, p in segment_files(live)]
    table = pq.read_table(path)
    table = table.set_column(0, SCHEMA.field(0), pc.cast(pc.add(table.column(0), 1), SCHEMA.field(0).type))
    pq.write_table(table.replace_schema_metadata({VERSION_KEY: str(SCHEMA_VERSION + 1).encode()}), path)
    query = stream_latency.start(spark, live, output, trigger=0.2)
    try:
        with pytest.raises(StreamingQueryException, match=f"export schema version {SCHEMA_VERSION + 1}, newer than this flowcast reads"):
            query.processAllAvailable()
        assert _table(output) is None  # nothing published
    finally:
        query.stop()
