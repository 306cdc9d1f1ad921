"""The ``shares:`` section of an estate layout: what queues may hold and what reads may cost.

Every house of the estate applies it when it is wired: the default byte
budgets of queue shares nothing declared one for (``queue_bytes``) and of
error queues (``error_queue_bytes``), and the read limits of its router --
the most one read returns (``read_max_bytes``) and what one other estate may
draw by reads (``read_bytes_per_second``, ``reads_per_second``).  A key not
given keeps its default (docs/routing.md, *Share reads and queue budgets*).
Apart from layoutread.py because these are the store's and the router's
words, and a layout without the section must not need them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:  # pragma: no cover
    from flowcast.house.layoutread import LayoutReader
    from flowcast.store import HouseLike

__all__ = ["SHARES_KEYS", "SharesSpec", "read_shares", "wire_shares"]

#: Keys and their bounds: bytes, and reads a second.
WHOLE = {
    "queue_bytes": (1 << 12, 1 << 40),
    "error_queue_bytes": (1 << 12, 1 << 32),
    "read_max_bytes": (1 << 10, 1 << 32),
    "read_bytes_per_second": (1 << 10, 1 << 40),
    "reads_per_second": (1, 1_000_000),
}
SHARES_KEYS = tuple(WHOLE)
_READS = {"read_max_bytes": "max_reply", "read_bytes_per_second": "bytes_per_second", "reads_per_second": "reads_per_second"}


@dataclass(frozen=True)
class SharesSpec:
    """The keys the section gave (None: the default stands)."""

    queue_bytes: int | None = None
    error_queue_bytes: int | None = None
    read_max_bytes: int | None = None
    read_bytes_per_second: int | None = None
    reads_per_second: int | None = None

    def read_limits(self) -> dict[str, int]:
        """The given read limits, as flowcast.routing.reads.ReadLimits's keywords."""
        return {name: getattr(self, key) for key, name in _READS.items() if getattr(self, key) is not None}


def read_shares(reader: LayoutReader, node: yaml.Node) -> SharesSpec | None:
    """The checked ``shares:`` section, or None after reporting its problems on ``reader``."""
    if reader.is_null(node):
        return SharesSpec()
    pairs = reader.mapping(node, "shares", SHARES_KEYS)
    if pairs is None:
        return None
    start = len(reader.errors)
    values: dict[str, Any] = {}
    for key, (low, high) in WHOLE.items():
        if key in pairs:
            values[key] = reader.integer(pairs[key][1], f"shares {key}", low, high)
    if len(reader.errors) > start:
        return None
    return SharesSpec(**values)


def wire_shares(house: HouseLike, spec: SharesSpec) -> None:
    """Apply ``spec`` to ``house``'s store and (when it gives read limits) its router."""
    house.store.set_queue_defaults(spec.queue_bytes, spec.error_queue_bytes)
    limits = spec.read_limits()
    if limits and house.router is not None:
        from flowcast.routing.reads import ReadLimits, configure_reads

        configure_reads(house.router, ReadLimits(**limits))
