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
    "CAST_KINDS",
    "CAST_ROW_COLUMNS",
    "CAUSAL_KINDS",
    "CAUSAL_ROW_COLUMNS",
    "KINDS",
    "ROW_COLUMNS",
    "SchemaVersionError",
    "check_version",
    "file_metadata",
]

#: The version this flowcast writes, and the newest it reads.  Version 2 added the CAST events and
#: their columns: a version-1 reader would count their message ids into its transport loss table.
#: Version 3 added the causal events and their columns, for the same reason.
SCHEMA_VERSION = 3
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
#: CAST's cache and delivery events (flowcast.export.castevents), publisher side then subscriber side.
CAST_KINDS = (
    "cast-stored",
    "cast-forwarded",
    "cast-resync",
    "cast-gap",
    "cast-lease-expired",
    "cast-delivered",
    "cast-duplicate",
)
#: Causal mailbox and relay events (flowcast.export.causalevents): per subscription, then per relay.
CAUSAL_KINDS = (
    "causal-buffered",
    "causal-delivered",
    "causal-rejected",
    "causal-abandoned",
    "causal-equivocation",
    "causal-fetched",
)
KINDS = (SHARE_KIND, PRESENCE_KIND, *MESSAGE_KINDS, *CAST_KINDS, *CAUSAL_KINDS)

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
        # Version 2, CAST events:
        pa.field("seq", pa.int64()),  # the message's cache seq, or the first of a range
        pa.field("upto", pa.int64()),  # the last seq of a range (forwarded, resync, gap)
        pa.field("count", pa.int64()),  # messages in a forwarded batch; seqs in a resync or gap range
        pa.field("sub", pa.string()),  # subscription id (hex), the same at both estates
        pa.field("name", pa.string()),  # the message's name, or the subscription's pattern
        # Version 3, causal events:
        pa.field("topic", pa.string()),  # the causal topic
        pa.field("publisher", pa.string()),  # the message's publisher key, hex
        pa.field("epoch", pa.int64()),  # the message's epoch
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

#: Columns a CAST row carries, in order (recorder.cast).
CAST_ROW_COLUMNS = ("stamp", "kind", "msg_id", "remote", "size", "latency", "seq", "upto", "count", "sub", "name", "detail")

#: Columns a causal row carries, in order (flowcast.export.causalevents).  Its length (14) tells it
#: apart from the other row shapes (segments.rows_to_batches).
CAUSAL_ROW_COLUMNS = (
    "stamp", "kind", "msg_id", "topic", "publisher", "epoch", "seq", "lag", "latency", "count", "sub", "share",
    "remote", "detail",
)

#: Low-cardinality columns worth dictionary-encoding (the rest are mostly unique).
DICTIONARY_COLUMNS = ["schema_version", "estate", "house", "kind", "share", "src", "dst", "remote", "detail", "sub", "topic", "publisher"]


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
