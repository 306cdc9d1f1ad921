"""The ``export:`` section of an estate layout: where its houses record their events.

With the section, every house of the estate records what ``flowcast run
FLOW --export DIR`` records for one flow house -- its logged shares, its
router's routed messages, its lane's and roads' message events, its CAST
and causal events -- as Parquet segments under one export directory, which
``flowcast export`` collects and ``flowcast spark`` reads (docs/export.md).
``flowcast run LAYOUT --export DIR`` does the same without the section and
overrides it.

Written as a path (``export: run/events``), as a mapping (``export: {dir:
run/events}``), or empty (``export:`` or ``export: {}``: ``RUN/events``).
Paths are relative to the layout's folder like every other path of a
layout.  The estate's name becomes part of file names, so it is held to the
export's alphabet (no dots) here, as a located error, not when a house
starts.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from flowcast.flow.yamlnodes import BOOL, show

if TYPE_CHECKING:  # pragma: no cover
    from flowcast.house.layoutread import LayoutReader

__all__ = ["EXPORT_KEYS", "DEFAULT_EXPORT", "read_export"]

EXPORT_KEYS = ("dir",)
#: The export directory when the section gives none, under the layout's run folder.
DEFAULT_EXPORT = "events"
#: flowcast.export.layout's alphabet for names in export files (not imported: that package loads pyarrow,
#: and reading a layout must not); tests/house/test_layout_export.py checks the two agree.
EXPORT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,63}")


def read_export(reader: LayoutReader, node: yaml.Node, run: Path | None, estate: str | None, estate_node: yaml.Node | None) -> Path | None:
    """The checked export directory (absolute), or None after reporting its problems on ``reader``."""
    start = len(reader.errors)
    place: Path | None
    if reader.is_null(node):
        place = run / DEFAULT_EXPORT if run is not None else None
    elif isinstance(node, yaml.MappingNode):
        pairs = reader.mapping(node, "export", EXPORT_KEYS)
        if pairs is None:
            return None
        if "dir" in pairs:
            place = reader.directory(pairs["dir"][1], "export dir", DEFAULT_EXPORT)
        else:
            place = run / DEFAULT_EXPORT if run is not None else None
    elif isinstance(node, yaml.ScalarNode) and node.tag == BOOL:
        reader.report(f"export is {show(str(node.value))}; it names a directory", node,
                      "write 'export: DIR', or 'export:' alone for RUN/events; leave the key out to export nothing")
        return None
    elif isinstance(node, yaml.ScalarNode):
        place = reader.directory(node, "export dir", DEFAULT_EXPORT)
    else:
        reader.report("export must be a directory or a mapping {dir: DIR}, not a list", node,
                      "e.g. 'export: run/events' or 'export: {dir: run/events}'")
        return None
    if estate is not None and not EXPORT_NAME.fullmatch(estate):
        reader.report(f"estate name {show(estate)} cannot name export files: want letters, digits, '_' or '-'",
                      estate_node if estate_node is not None else node,
                      "an estate that exports is named without dots (or leave out 'export:')")
        return None
    if len(reader.errors) > start:
        return None
    return place
