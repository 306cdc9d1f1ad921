"""Reading segments back, refusing what cannot be read honestly.

Two kinds of bad file get two different answers.  A corrupt or truncated
file is damage: tools count it, name it and go on with the rest.  A file of
a newer schema version is not damage, it is data this flowcast does not
understand: reading it anyway could produce wrong figures, so it is refused
with :class:`~flowcast.export.schema.SchemaVersionError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from flowcast.errors import Error
from flowcast.export.schema import SCHEMA, VERSION_KEY, SchemaVersionError, file_metadata

__all__ = ["CorruptSegmentError", "SchemaVersionError", "SegmentInfo", "conform", "inspect", "read_segment", "read_segments"]


class CorruptSegmentError(ValueError, Error):
    """A segment file that is not readable Parquet of the export schema."""


@dataclass(frozen=True)
class SegmentInfo:
    path: Path
    rows: int
    version: int
    size: int


def inspect(path: Path) -> SegmentInfo:
    """The footer facts of one segment, checked; raises on damage or a future version."""
    path = Path(path)
    try:
        meta = pq.read_metadata(path)
        schema = pq.read_schema(path)
    except (pa.ArrowException, OSError) as error:
        raise CorruptSegmentError(f"{path}: not a readable Parquet file ({error})") from None
    if VERSION_KEY not in (schema.metadata or {}):
        # Someone else's Parquet in an export directory: skip it like damage, do not stop for it.
        raise CorruptSegmentError(f"{path}: not a flowcast export file (no {VERSION_KEY.decode()} metadata)")
    version = file_metadata(schema.metadata, str(path))
    missing = [n for n in ("ts", "kind", "estate", "house") if n not in schema.names]
    if missing:
        raise CorruptSegmentError(f"{path}: export columns missing: {', '.join(missing)}")
    return SegmentInfo(path, meta.num_rows, version, path.stat().st_size)


def read_segment(path: Path) -> pa.Table:
    """One segment as a table of the current schema (absent columns as nulls)."""
    inspect(path)
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as error:
        raise CorruptSegmentError(f"{path}: unreadable data ({error})") from None
    return conform(table, str(path))


def conform(table: pa.Table, where: str) -> pa.Table:
    """``table`` with exactly the current schema's columns, in order."""
    columns = []
    for f in SCHEMA:
        if f.name in table.column_names:
            col = table.column(f.name)
            if col.type != f.type:
                try:
                    col = col.cast(f.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
                    raise CorruptSegmentError(f"{where}: column {f.name!r} has type {col.type}, want {f.type} ({error})") from None
        else:
            col = pa.nulls(table.num_rows, f.type)
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=SCHEMA)


def read_segments(paths: list[Path]) -> tuple[pa.Table, list[str]]:
    """Readable segments concatenated, and one message per corrupt file skipped.

    A future schema version still raises: see the module docstring.
    """
    tables, skipped = [], []
    for path in paths:
        try:
            tables.append(read_segment(path))
        except CorruptSegmentError as error:
            skipped.append(str(error))
    if not tables:
        return SCHEMA.empty_table(), skipped
    return pa.concat_tables(tables), skipped

