"""What a link holds for order or reassembly, and what each thing held costs.

The receiving part (receiver.py) keeps, per stream, the messages that came
ahead of a gap and the pieces of messages not yet whole; the hold budget
(budget.py) evicts and expires them.  Both count a held thing the same
way, by :func:`held_cost`, in bytes of memory rather than bytes sent: a
receiver that counted payload alone could be made to hold many times its
limit in books.  These are the types and the costs they share.
"""

from __future__ import annotations

import sys
from typing import Any

from flowcast.transport.tablesize import GROW_AT
from flowcast.transport.wire import WireError

__all__ = [
    "BYTES_HEADER",
    "EMPTY_DICT",
    "ENTRY_COST",
    "FIRST_TABLE",
    "INT_KEY",
    "PARTIAL_COST",
    "SKIPPED",
    "SKIP_COST",
    "STREAM_COST",
    "AGE_COST",
    "VIEW_HELD",
    "StreamIn",
    "Partial",
    "held_cost",
]

# What held data costs beyond its bytes (CPython 3.11, 64-bit, measured with
# tracemalloc: tests/transport/test_budget.py keeps them honest): empty chunks
# are not free, and the budget must count what is held, not what was sent.
ENTRY_COST = 145  # a whole message held out of order (tuple, dict slot, key, bytes header)
SKIP_COST = 80  # a SKIP held out of order
PARTIAL_COST = 240  # an incomplete message: its object, an empty dict of pieces, its slot and key
# A stream's own state, held for as long as the session lives (a peer names
# up to 65,536 streams: 13.5 MB a session when this was not counted): its
# StreamIn, the empty dict of what waits, its slot and key in the link's
# streams and its place in the ACK rotation (receiver.py).
STREAM_COST = 204
# An entry of a link's age heap (heldage.py): its tuple, counter, id and list slot.
AGE_COST = 152
# A piece costs its bytes object (one-byte ones are shared), its key (small
# ints are shared), and what it grows the dict of pieces by (sys.getsizeof):
# dict tables grow by doubling, so a constant per piece is off by up to 2x.
BYTES_HEADER = sys.getsizeof(b"")  # a bytes object's header
INT_KEY = sys.getsizeof(1 << 20)
_VIEW = sys.getsizeof(memoryview(b""))
VIEW_HELD = BYTES_HEADER + _VIEW  # a view's own object and its datagram's bytes header
EMPTY_DICT = sys.getsizeof({})
FIRST_TABLE = sys.getsizeof({1 << 20: None}) - EMPTY_DICT  # what a dict's first insert allocates


class StreamIn:
    """A stream as received: the next sequence number to deliver, and what waits behind a gap.

    ``dropped`` counts entries the hold budget took out of ``pending`` since
    it was last copied: a dict keeps its table when entries go, so it is
    copied once as many went as are left (budget.py), not at every eviction.
    """

    __slots__ = ("stream", "expected", "pending", "dropped")

    def __init__(self, stream: int = 0) -> None:
        self.stream = stream
        self.expected = 0
        self.pending: dict[int, Any] = {}  # seq -> (flags, bytes) | Partial | SKIPPED
        self.dropped = 0


class Partial:
    """A message whose pieces are not all in yet, with what its books cost so far."""

    __slots__ = ("count", "parts", "size", "flags", "born", "last", "waste", "piece", "table", "step", "grow_at")

    def __init__(self, count: int, flags: int, born: float) -> None:
        self.count = count
        self.parts: dict[int, bytes] = {}
        self.size = 0
        self.flags = flags
        self.born = born
        self.last = born  # when the last new piece came (incomplete messages expire from it)
        self.waste = 0  # bytes held beyond the pieces' data: objects, keys, the dict, datagrams kept whole
        self.piece = 0  # the length every piece but the last has (0: none seen yet)
        self.table = EMPTY_DICT  # sys.getsizeof(parts), as last accounted
        self.step = 0  # index in tablesize.GROW_AT of the next length at which parts grows
        self.grow_at = GROW_AT[0]


SKIPPED = (0, None)


def held_cost(item: Any) -> int:
    """What ``item`` (held in a stream or reassembly) counts against the hold limit."""
    if isinstance(item, Partial):
        return item.size + item.waste + PARTIAL_COST
    data = item[1]
    return len(data) + ENTRY_COST if data is not None else SKIP_COST


class _CannotHold(WireError):
    """The receiver cannot hold this now: the packet stays unacknowledged."""
