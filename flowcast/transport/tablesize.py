"""What a dict of a message's pieces occupies, known without asking per piece.

The hold budget counts a dict of pieces by its real size (reliable.py), and
a dict's table grows only at a few lengths (doubling): asking
``sys.getsizeof`` per piece is a call per datagram on the receive path for
an answer that changes a dozen times in a message.  A dict that only ever
gains int keys has the same size at the same length whatever the keys, so
the lengths where it grows, and to what, are measured once here, on this
interpreter (nothing about CPython's growth rule is assumed).  Past the
measured lengths a caller asks ``sys.getsizeof`` as before.
"""

from __future__ import annotations

import sys

__all__ = ["GROW_AT", "SIZE_AT", "MEASURED"]

#: Lengths measured; a dict of pieces longer than this is asked directly.
MEASURED = 1 << 14


def _measure(limit: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    table: dict[int, None] = {}
    size = sys.getsizeof(table)
    grow_at: list[int] = []
    size_at: list[int] = []
    for n in range(1, limit + 1):
        table[(1 << 20) + n] = None  # not small ints: as any piece key may be
        now = sys.getsizeof(table)
        if now != size:
            grow_at.append(n)
            size_at.append(now)
            size = now
    grow_at.append(limit + 1)  # the first length not measured: ask from there on
    size_at.append(-1)
    return tuple(grow_at), tuple(size_at)


#: ``GROW_AT[k]``: the k-th length at which the dict's size changes, to ``SIZE_AT[k]``
#: (the last entry is ``MEASURED + 1`` with size -1: not known, ask).
GROW_AT, SIZE_AT = _measure(MEASURED)
