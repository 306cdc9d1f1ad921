"""What a message that was never packed weighs, for a queue's byte budget.

A message that came by lane or road is counted at its parcel's length, which
is known for free.  A message routed within its own house is not packed at
all: its data is passed by reference, so what the queue pins is the
sender's object.  Packing it only to weigh it cost more than routing it
(+20% for a tiny payload, several times over for a 2 KB one), so it is
estimated instead, as msgpack would size it, without packing and in
bounded time: bytes and text at their length, a container's items one
level down looked at (the first few of a long one, the rest assumed
alike), and each entry of a container below that at ``DEEP`` bytes.  That
sees what makes messages big in practice -- a blob or a text, alone or as
a field; a list of records -- and overstates most small data.  What is
not msgpack's kind (data kept within a house need not be packable) counts
as the memory it takes (``sys.getsizeof``).  A blob
nested deeper, or a dict key longer than ``_KEY``, is not seen: that is
bounded by the queue's message count only.
"""

from __future__ import annotations

from itertools import islice
from sys import getsizeof
from typing import Any

__all__ = ["DEEP", "SAMPLE", "estimate"]

#: Items of a container looked at; a longer one is assumed to continue alike.
SAMPLE = 8
#: Bytes assumed for each entry of a container two levels down (a short key
#: and a number or short text take less as msgpack).
DEEP = 32
_SCALAR = 9  # the most msgpack gives a number
_HEAD = 5  # the most msgpack gives a length header
_KEY = 16  # a dict's key: a name (a longer one is not seen)


def _other(data: Any) -> int:
    # Not msgpack's kind (an object a flow keeps within its house): the memory it
    # takes, which for an array that owns its buffer includes the buffer.
    if data.__class__ is memoryview:
        return data.nbytes + _HEAD
    return getsizeof(data)


def estimate(data: Any) -> int:
    """Bytes ``data`` would take as msgpack, estimated in bounded time (see the module docstring)."""
    cls = data.__class__
    if cls is bytes or cls is bytearray:
        return len(data) + _HEAD
    if cls is str:
        return (len(data) if data.isascii() else 4 * len(data)) + _HEAD
    if cls is dict:
        n = len(data)
        items: Any = data.values() if n <= SAMPLE else islice(data.values(), SAMPLE)
        size = n * _KEY if n <= SAMPLE else SAMPLE * _KEY
    elif cls is list or cls is tuple:
        n = len(data)
        items = data if n <= SAMPLE else islice(data, SAMPLE)
        size = 0
    elif cls is int or cls is float or data is None or cls is bool:
        return _SCALAR
    else:
        return _other(data)
    for item in items:
        cls = item.__class__
        if cls is bytes or cls is bytearray:
            size += len(item) + _HEAD
        elif cls is str:
            size += (len(item) if item.isascii() else 4 * len(item)) + _HEAD
        elif cls is dict or cls is list or cls is tuple:
            size += DEEP * len(item) + _HEAD
        elif cls is int or cls is float or item is None or cls is bool:
            size += _SCALAR
        else:
            size += _other(item)
    if n > SAMPLE:
        size = size * n // SAMPLE
    return size + _HEAD
