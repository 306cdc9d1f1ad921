"""The Parquet segment writer, with a journal so a crash loses little and says so.

Events reach the writer in batches (the recorder buffers them).  The open
segment lives in two hidden files under ``ROOT/.journal/ESTATE.HOUSE/``:

* ``SEG.journal`` -- an Arrow IPC stream, one record batch per flush.  A
  stream can be read back batch by batch up to a torn tail, so a crash keeps
  every flushed batch.
* ``SEG.count`` -- 16 bytes, memory-mapped: how many events the recorder
  holds unflushed (``pending``) and how many rows the journal holds
  (``journaled``), packed into one 8-byte store so a kill can never land
  between the two.  Mapped pages outlive the process, so after ``kill -9``
  the next start knows exactly how many events were lost (pending ones, plus
  any torn batch), not just that some were.

When the segment reaches ``max_bytes`` of journal or ``max_age`` seconds of
event time, it is finalised: its batches are split by UTC day, written as
zstd Parquet to ``DAY/HOUSE/.NAME.parquet.inprogress``, fsynced and renamed
to ``NAME.parquet``; only then are the journal files removed.  Recovery on
start repeats exactly that for any journal left behind (skipping days whose
final file already exists), so a crash at any step neither loses nor
duplicates a finished batch.
"""

from __future__ import annotations

import fcntl
import json
import mmap
import os
import secrets
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from flowcast.errors import Error
from flowcast.export.layout import check_part, inprogress, journal_dir, partition_dir, publish
from flowcast.export.schema import (
    CAST_ROW_COLUMNS, CAUSAL_ROW_COLUMNS, DICTIONARY_COLUMNS, ROW_COLUMNS, SCHEMA, SCHEMA_VERSION, SHARE_KIND,
)
from flowcast.export.reader import CorruptSegmentError, conform

__all__ = ["Recovery", "SegmentWriter", "route_text", "rows_to_batch", "rows_to_batches", "write_parquet"]

_COUNT = struct.Struct("<II")  # pending, journaled
_MAGIC = b"fcexp001"
_COUNT_SIZE = 16
_REQUIRED = frozenset(f.name for f in SCHEMA if not f.nullable)  # an older journal must have these to be read
_US_PER_DAY = 86_400_000_000


_encode = json.JSONEncoder(separators=(",", ":"), default=repr).encode  # built once: dumps() builds one per call
_quote = json.encoder.encode_basestring_ascii


_INF = float("inf")
_CONSTANTS = {None: '{"value":null}', True: '{"value":true}', False: '{"value":false}'}


def _encode_fields(fields: Any) -> str | None:
    """Fields as JSON; the common ``{"value": scalar}`` without the general encoder (3x faster)."""
    if fields is None:
        return None
    if len(fields) == 1 and "value" in fields:
        v = fields["value"]
        t = v.__class__
        if t is int:
            return '{"value":%d}' % v
        if t is float and -_INF < v < _INF:
            return '{"value":%r}' % v
        if t is str:
            return '{"value":' + _quote(v) + "}"
        if t is bool or v is None:
            return _CONSTANTS[v]
    return _encode(fields)


def route_text(route: Any) -> str | None:
    """A route tuple as ``share/yard/estate/channel`` (empty parts stay empty)."""
    if route is None or isinstance(route, str):
        return route
    return "/".join("" if part is None else str(part) for part in route)


_TEXT_TYPES = {str, type(None)}


def _route_column(col: tuple) -> Sequence[Any]:
    if set(map(type, col)) <= _TEXT_TYPES:
        return col
    memo = {x: route_text(x) for x in set(col)}  # a house has few routes: convert each once per batch
    return list(map(memo.__getitem__, col))


def _column(values: tuple, type_: pa.DataType, n: int) -> pa.Array:
    """An Arrow column; all-null columns (most of them, per kind) skip conversion."""
    if values.count(None) == n:
        return pa.nulls(n, type_)
    return pa.array(values, type_)


def _times(stamp: tuple, n: int, epoch_us: int) -> tuple[pa.Array, pa.Array]:
    stamps = pa.array(stamp, pa.float64())
    ts_us = pc.add(pc.cast(pc.round(pc.multiply(stamps, 1_000_000.0)), pa.int64()), epoch_us)
    return stamps, pc.cast(ts_us, SCHEMA.field("ts").type)


def _constant(value: Any, type_: pa.DataType, n: int) -> pa.Array:
    return pa.repeat(pa.scalar(value, type_), n)


def _message_batch(rows: Sequence[tuple], estate: str, house: str, epoch_us: int) -> pa.RecordBatch:
    n = len(rows)
    (stamp, kind, share, fields, msg_id, src, dst, size, latency, segment, lag, remote, detail) = zip(*rows)
    stamps, ts = _times(stamp, n, epoch_us)
    columns = [
        _constant(SCHEMA_VERSION, pa.int16(), n),
        ts,
        stamps,
        _constant(estate, pa.string(), n),
        _constant(house, pa.string(), n),
        pa.array(kind, pa.string()),
        _column(share, pa.string(), n),
        pa.nulls(n, pa.string()),
        _column(msg_id, pa.string(), n),
        _column(tuple(_route_column(src)), pa.string(), n),
        _column(tuple(_route_column(dst)), pa.string(), n),
        _column(size, pa.int64(), n),
        _column(latency, pa.float64(), n),
        _column(segment, pa.int32(), n),
        _column(lag, pa.float64(), n),
        _column(remote, pa.string(), n),
        _column(detail, pa.string(), n),
    ]
    columns += [pa.nulls(n, f.type) for f in list(SCHEMA)[len(columns):]]
    return pa.RecordBatch.from_arrays(columns, schema=SCHEMA)


def _named_batch(names: tuple[str, ...]) -> Callable[[Sequence[tuple], str, str, int], pa.RecordBatch]:
    """The batch maker for rows of the columns ``names`` (CAST's and causal events' shapes)."""
    return partial(_columns_batch, names)


def _columns_batch(names: tuple[str, ...], rows: Sequence[tuple], estate: str, house: str, epoch_us: int) -> pa.RecordBatch:
    n = len(rows)
    values = dict(zip(names, zip(*rows)))
    stamps, ts = _times(values.pop("stamp"), n, epoch_us)
    known = {"schema_version": _constant(SCHEMA_VERSION, pa.int16(), n), "ts": ts, "stamp": stamps,
             "estate": _constant(estate, pa.string(), n), "house": _constant(house, pa.string(), n)}
    columns = [known[f.name] if f.name in known else _column(values[f.name], f.type, n) if f.name in values else pa.nulls(n, f.type)
               for f in SCHEMA]
    return pa.RecordBatch.from_arrays(columns, schema=SCHEMA)



def _share_batch(rows: Sequence[tuple], estate: str, house: str, epoch_us: int) -> pa.RecordBatch:
    n = len(rows)
    stamp, share, fields = zip(*rows)
    stamps, ts = _times(stamp, n, epoch_us)
    encode = _encode_fields
    head = [
        _constant(SCHEMA_VERSION, pa.int16(), n),
        ts,
        stamps,
        _constant(estate, pa.string(), n),
        _constant(house, pa.string(), n),
        _constant(SHARE_KIND, pa.string(), n),
        pa.array(share, pa.string()),
        pa.array([encode(f) for f in fields], pa.string()),
    ]
    tail = [pa.nulls(n, f.type) for f in list(SCHEMA)[len(head):]]
    return pa.RecordBatch.from_arrays(head + tail, schema=SCHEMA)


_SHAPES = ((3, _share_batch), (len(CAST_ROW_COLUMNS), _named_batch(CAST_ROW_COLUMNS)),
           (len(CAUSAL_ROW_COLUMNS), _named_batch(CAUSAL_ROW_COLUMNS)))
_OTHER = frozenset(length for length, _ in _SHAPES)
# Shapes are told apart by length alone: a new one must not share a length with another, nor with a message row.
if len(_OTHER) != len(_SHAPES) or len(ROW_COLUMNS) in _OTHER:
    raise RuntimeError("export row shapes must differ in length")


def rows_to_batches(rows: Sequence[tuple], estate: str, house: str, epoch_us: int) -> list[pa.RecordBatch]:
    """Recorder rows to batches of the export schema.

    Three row shapes come in: share changes ``(stamp, share, fields)``,
    message/presence events (``schema.ROW_COLUMNS`` order), CAST events
    (``schema.CAST_ROW_COLUMNS``) and causal events (``schema.CAUSAL_ROW_COLUMNS``),
    told apart by their length; each shape
    becomes its own batch.  Conversion happens here, per batch, rather than
    per event in the house: column-wise it costs about a microsecond an event.
    """
    shapes = set(map(len, rows))
    if len(shapes) == 1:
        (length,) = shapes
        return [dict(_SHAPES).get(length, _message_batch)(rows, estate, house, epoch_us)]
    batches = [make([r for r in rows if len(r) == length], estate, house, epoch_us) for length, make in _SHAPES if length in shapes]
    other = [r for r in rows if len(r) not in _OTHER]
    if other:
        batches.append(_message_batch(other, estate, house, epoch_us))
    return batches


def rows_to_batch(rows: Sequence[tuple], estate: str, house: str, epoch_us: int) -> pa.RecordBatch:
    """All ``rows`` as one batch (tools and tests; the writer keeps shapes apart)."""
    batches = rows_to_batches(rows, estate, house, epoch_us)
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches, SCHEMA).combine_chunks().to_batches()[0]


def write_parquet(table: pa.Table, final: Path) -> None:
    """Write ``table`` to ``final`` through a hidden in-progress name."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = inprogress(final)
    pq.write_table(
        table.replace_schema_metadata(SCHEMA.metadata),
        tmp,
        compression="zstd",
        use_dictionary=DICTIONARY_COLUMNS,
        write_statistics=["ts", "kind", "house", "schema_version"],
    )
    publish(tmp, final)


def _split_days(table: pa.Table) -> list[tuple[datetime, pa.Table]]:
    """The table's rows by UTC day (a segment may straddle midnight)."""
    ts = pc.cast(table.column("ts"), pa.int64())
    first, last = pc.min(ts).as_py(), pc.max(ts).as_py()
    day0, day1 = first // _US_PER_DAY, last // _US_PER_DAY
    out = []
    for d in range(day0, day1 + 1):
        if day0 == day1:
            part = table
        else:
            mask = pc.and_(pc.greater_equal(ts, d * _US_PER_DAY), pc.less(ts, (d + 1) * _US_PER_DAY))
            part = table.filter(mask)
        if part.num_rows:
            out.append((datetime.fromtimestamp(d * 86_400, tz=timezone.utc), part))
    return out


@dataclass
class Recovery:
    """What a start found of a previous run's open segments."""

    recovered: int = 0  # events read back from journals and published
    lost: int = 0  # events accepted but never flushed (or in a torn batch)
    segments: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        if not self.notes:
            return "export: clean start"
        return (
            f"export: recovered {self.recovered} event(s) from an interrupted segment, "
            f"lost {self.lost} unflushed event(s)"
        )


class WriterBusyError(OSError, Error):
    """Another live writer holds this estate's and house's journal."""


class SegmentWriter:
    """Bounded, crash-safe Parquet segments for one house."""

    def __init__(
        self,
        root: Path | str,
        estate: str,
        house: str,
        *,
        epoch: float,
        max_bytes: int = 32 << 20,
        max_age: float = 300.0,
        out: Callable[[str], None] | None = None,
    ) -> None:
        self.root = Path(root)
        self.estate = check_part("estate", estate)
        self.house = check_part("house", house)
        self.epoch_us = round(epoch * 1_000_000)
        self.max_bytes = max_bytes
        self.max_age = max_age
        self.jdir = journal_dir(self.root, estate, house)
        self.jdir.mkdir(parents=True, exist_ok=True)
        # One writer per estate and house: a second one would "recover" (publish
        # and delete) the live journal of the first.  The lock is on the journal
        # directory itself (no lock file to leave behind) and dies with us.
        self._lock = os.open(self.jdir, os.O_RDONLY)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock)
            raise WriterBusyError(
                f"another writer for estate {estate!r} house {house!r} is running on {self.root}"
            ) from None
        self.published: list[Path] = []
        self.events = 0  # events published or journaled by this writer
        self.recovery = self.recover()
        if out is not None and self.recovery.notes:
            out(str(self.recovery))
        self.closed = False
        self._open()

    # -- the open segment ------------------------------------------------

    def _open(self) -> None:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        self.name = f"{self.estate}.{self.house}.{stamp}.{secrets.token_hex(3)}"
        self._journal_path = self.jdir / f"{self.name}.journal"
        count_path = self.jdir / f"{self.name}.count"
        with open(count_path, "wb") as f:
            f.write(bytes(8) + _MAGIC)
        self._count_file = open(count_path, "r+b")
        self.counter = mmap.mmap(self._count_file.fileno(), _COUNT_SIZE)
        self._count_path = count_path
        self._sink: pa.OSFile | None = None
        self._stream: pa.ipc.RecordBatchStreamWriter | None = None
        self._batches: list[pa.RecordBatch] = []
        self.journaled = 0
        self.opened_at: float | None = None  # event-time stamp of the first event

    def append(self, rows: Sequence[tuple], now: float) -> None:
        """Journal ``rows`` (all the caller's pending events); roll the segment if due."""
        if self.closed:
            raise ValueError("segment writer is closed")
        if not rows:
            return
        batches = rows_to_batches(rows, self.estate, self.house, self.epoch_us)
        if self._stream is None:
            self._sink = pa.OSFile(str(self._journal_path), "wb")
            self._stream = pa.ipc.new_stream(self._sink, SCHEMA)
            self.opened_at = rows[0][0]
        for batch in batches:
            self._stream.write_batch(batch)
        self._batches.extend(batches)
        self.journaled += len(rows)
        self.events += len(rows)
        _COUNT.pack_into(self.counter, 0, 0, self.journaled)
        if self._sink.tell() >= self.max_bytes or self.due(now):
            self.rotate()

    def due(self, now: float) -> bool:
        """True when the open segment has been open ``max_age`` seconds of event time."""
        return self.opened_at is not None and now - self.opened_at >= self.max_age

    def rotate(self) -> list[Path]:
        """Publish the open segment (if it holds events) and open a fresh one."""
        paths = self._finish()
        if not self.closed:
            self._open()
        return paths

    def close(self) -> list[Path]:
        """Publish the open segment; the writer accepts nothing afterwards."""
        if self.closed:
            return []
        self.closed = True
        try:
            return self._finish()
        finally:
            os.close(self._lock)  # releases the flock: another writer may start

    def _finish(self) -> list[Path]:
        if self._stream is not None:
            self._stream.close()
            self._sink.close()
        paths: list[Path] = []
        if self._batches:
            table = pa.Table.from_batches(self._batches, SCHEMA)
            paths = self._publish(table, self.name)
        self.counter.close()
        self._count_file.close()
        self._journal_path.unlink(missing_ok=True)
        self._count_path.unlink(missing_ok=True)
        self.published.extend(paths)
        return paths

    def _publish(self, table: pa.Table, name: str, skip_existing: bool = False) -> list[Path]:
        paths = []
        for day, part in _split_days(table):
            final = partition_dir(self.root, day.date(), self.house) / f"{name}.parquet"
            if not (skip_existing and final.exists()):
                write_parquet(part, final)
            paths.append(final)
        return paths

    # -- recovery ----------------------------------------------------------

    def recover(self) -> Recovery:
        """Publish what earlier runs journaled, and count what they lost."""
        report = Recovery()
        names = sorted({p.name.rsplit(".", 1)[0] for p in self.jdir.iterdir() if p.suffix in (".journal", ".count")})
        for name in names:
            journal = self.jdir / f"{name}.journal"
            count = self.jdir / f"{name}.count"
            batches = _read_journal(journal) if journal.exists() else []
            rows = sum(b.num_rows for b in batches)
            pending, journaled = _read_count(count)
            # A batch written just before the kill may be in the journal while the
            # counter still lists its events as pending; those were not lost.
            extra = max(0, rows - journaled)
            lost = max(0, pending - extra) + max(0, journaled - rows)
            if batches:
                table = pa.Table.from_batches(batches, SCHEMA)
                report.segments.extend(self._publish(table, name, skip_existing=True))
            report.recovered += rows
            report.lost += lost
            report.notes.append(f"{name}: recovered {rows}, lost {lost}")
            journal.unlink(missing_ok=True)
            count.unlink(missing_ok=True)
        return report


def _read_journal(path: Path) -> list[pa.RecordBatch]:
    """Every complete batch of an IPC stream, stopping quietly at a torn tail."""
    batches: list[pa.RecordBatch] = []
    try:
        with pa.OSFile(str(path), "rb") as f:
            reader = pa.ipc.open_stream(f)
            older = reader.schema.remove_metadata() != SCHEMA.remove_metadata()
            if older and not _REQUIRED <= set(reader.schema.names):
                return []
            while True:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    break
                if older:  # journaled by an earlier flowcast (a crash, then an upgrade): its columns, the rest null
                    batch = conform(pa.Table.from_batches([batch]), str(path)).combine_chunks().to_batches()
                    batch = batch[0] if batch else None
                if batch is not None:
                    batches.append(batch)
    except (pa.ArrowInvalid, OSError, EOFError, CorruptSegmentError):
        pass  # torn header or tail, or a column that does not convert: keep what was read (the rest is counted lost)
    return batches


def _read_count(path: Path) -> tuple[int, int]:
    try:
        data = path.read_bytes()
    except OSError:
        return 0, 0
    if len(data) != _COUNT_SIZE or data[8:] != _MAGIC:
        return 0, 0
    return _COUNT.unpack_from(data, 0)
