"""The export schema: one wide, versioned event table.

Share changes, message events and presence changes share one table so a
single scan answers questions that cross them (a share changed after which
message?).  Columns a kind does not use are null; Parquet stores a null run
in a few bytes, so the wide table costs little.

The version travels twice: in every row (``schema_version``, so Spark on a
cluster can check it without reading footers) and in the file's key-value
metadata (so a reader can refuse a file before decoding any row).  A reader
accepts versions up to :data:`SCHEMA_VERSION` and refuses newer ones with
:class:`SchemaVersionError`: guessing at a future layout would produce wrong
numbers silently, which is worse than no numbers.
"""

from __future__ import annotations

import pyarrow as pa

from flowcast.errors import Error

__all__ = [
    "SCHEMA_VERSION",
    "VERSION_KEY",
    "SCHEMA",
    "MESSAGE_KINDS",
    "SHARE_KIND",
    "PRESENCE_KIND",
    "KINDS",
    "ROW_COLUMNS",
    "SchemaVersionError",
    "check_version",
    "file_metadata",
]

#: The version this flowcast writes, and the newest it reads.
SCHEMA_VERSION = 1
#: Parquet key-value metadata key holding the version as ASCII digits.
VERSION_KEY = b"flowcast.export.schema_version"

SHARE_KIND = "share"
PRESENCE_KIND = "presence"
#: Message event kinds, as the stacks and routers report them.
MESSAGE_KINDS = (
    "sent",
    "received",
    "acknowledged",
    "resent",
    "segment-missed",
    "buffered",
    "delivered",
    "denied",
    # Share to share, by routers (flowcast.routing.events): across every hop.
    "routed",
    "landed",
    "refused",
)
KINDS = (SHARE_KIND, PRESENCE_KIND, *MESSAGE_KINDS)

UTC_US = pa.timestamp("us", tz="UTC")  # nanoseconds fail to read in Spark

SCHEMA = pa.schema(
    [
        pa.field("schema_version", pa.int16(), nullable=False),
        pa.field("ts", UTC_US, nullable=False),  # wall time of the event
        pa.field("stamp", pa.float64(), nullable=False),  # house clock seconds
        pa.field("estate", pa.string(), nullable=False),
        pa.field("house", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("share", pa.string()),  # share changes: the share's name
        pa.field("fields", pa.string()),  # share changes: the fields as JSON
        pa.field("msg_id", pa.string()),
        pa.field("src", pa.string()),  # route source, "share/yard/estate/channel"
        pa.field("dst", pa.string()),  # route destination, same form
        pa.field("size", pa.int64()),  # bytes of the message body
        pa.field("latency", pa.float64()),  # seconds, where the reporter knows it
        pa.field("segment", pa.int32()),  # segment index (missed) or attempt (resent)
        pa.field("lag", pa.float64()),  # causal buffering lag, seconds
        pa.field("remote", pa.string()),  # presence: the remote estate
        pa.field("detail", pa.string()),  # presence status, deny reason, ...
    ],
    metadata={VERSION_KEY: str(SCHEMA_VERSION).encode()},
)

#: Columns a recorder row carries, in order (the others are constant per writer).
ROW_COLUMNS = (
    "stamp",
    "kind",
    "share",
    "fields",
    "msg_id",
    "src",
    "dst",
    "size",
    "latency",
    "segment",
    "lag",
    "remote",
    "detail",
)

#: Low-cardinality columns worth dictionary-encoding (the rest are mostly unique).
DICTIONARY_COLUMNS = ["schema_version", "estate", "house", "kind", "share", "src", "dst", "remote", "detail"]


class SchemaVersionError(ValueError, Error):
    """Data written by a newer (or broken) flowcast; refusing beats misreading."""


def check_version(version: int | None, where: str) -> int:
    """``version`` when this flowcast can read it; otherwise a clear error."""
    if version is None:
        raise SchemaVersionError(f"{where}: no flowcast export schema version; not a flowcast export file")
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{where}: export schema version {version} is newer than this flowcast reads "
            f"(up to {SCHEMA_VERSION}); upgrade flowcast to read it"
        )
    if version < 1:
        raise SchemaVersionError(f"{where}: invalid export schema version {version}")
    return version


def file_metadata(metadata: dict[bytes, bytes] | None, where: str) -> int:
    """The checked schema version recorded in a Parquet file's metadata."""
    raw = (metadata or {}).get(VERSION_KEY)
    if raw is None:
        return check_version(None, where)
    try:
        version = int(raw.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise SchemaVersionError(f"{where}: unreadable export schema version {raw!r}") from None
    return check_version(version, where)
