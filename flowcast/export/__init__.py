"""Share histories and message events to Parquet, for Spark.

:class:`Recorder` is the in-house side (what shares, stacks and routers
feed); :mod:`flowcast.export.collect` is ``flowcast export``;
:mod:`flowcast.export.sparkcli` is ``flowcast spark``.  The schema and its
versioning are in :mod:`flowcast.export.schema` and ``docs/export.md``.
"""

from flowcast.export.reader import CorruptSegmentError, read_segment, read_segments
from flowcast.export.recorder import Recorder, route_text
from flowcast.export.schema import MESSAGE_KINDS, SCHEMA, SCHEMA_VERSION, SchemaVersionError
from flowcast.export.segments import Recovery, SegmentWriter

__all__ = [
    "MESSAGE_KINDS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "CorruptSegmentError",
    "Recorder",
    "Recovery",
    "SchemaVersionError",
    "SegmentWriter",
    "read_segment",
    "read_segments",
    "route_text",
]
