"""A route pair: the unit a router caches, counts and orders messages by.

A flow sends along the same few (source share, destination share) routes
over and over, so everything derived from a pair -- its transport stream
number, its packed routes, how long the far end may answer -- is worked out
once and kept here, not per message.
"""

from __future__ import annotations

import zlib

from flowcast.routing.parcel import route_bytes
from flowcast.routing.route import Route

__all__ = ["Pair"]


class Pair:
    """A validated (src, dst) route pair and what is derived from it once."""

    __slots__ = ("src", "dst", "stream", "count", "packed", "errors_until", "reads")

    def __init__(self, src: Route, dst: Route) -> None:
        self.src = src
        self.dst = dst
        # In order per pair of shares; the same number in every process.
        self.stream = zlib.crc32(f"{src.share}>{dst.share}".encode()) & 0xFFFF
        self.count = 0
        self.packed = route_bytes(src) + route_bytes(dst)
        self.errors_until = 0.0  # error reports from dst.estate accepted until then
        self.reads = 0  # read requests sent on this pair not answered yet
