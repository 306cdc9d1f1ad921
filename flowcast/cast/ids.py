"""Message ids: 16 bytes, time-ordered, chosen by the publisher.

Why time-ordered: the cache's UNIQUE index on ids is what dedupe costs,
and a B-tree fed random UUIDs touches a random page per insert (measured:
about 6x slower than ids that grow with time).  Why chosen by the
publisher: a retried publish must carry the same id, so the cache can
store it once.

The layout is UUIDv7's (RFC 9562): 48 bits of milliseconds since the
epoch, the version nibble 7, 12 bits, the variant bits ``10``, 62 bits.
The 74 bits after the stamp are random at the first id of a millisecond
and counted up by one for every further id in the same millisecond, so a
process makes ids that strictly increase however many it makes per
millisecond (if the counter would overflow, the stamp borrows the next
millisecond).  Ids from different processes are ordered only by time.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from collections.abc import Callable

__all__ = ["ID_SIZE", "IdMaker", "check_id", "id_hex", "id_time", "new_id"]

ID_SIZE = 16

_COUNTER_BITS = 74
_COUNTER_MAX = (1 << _COUNTER_BITS) - 1
#: The first counter of a millisecond is random below this, so at least
#: 2**72 further ids fit in the millisecond before the stamp must borrow.
_SEED_BITS = 72


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


#: The random part needs to be unpredictable across processes, not secret
#: (ids travel in the clear with the routing metadata): a generator seeded
#: from the OS, reseeded in a forked child so two houses never share a
#: stream.  ``os.urandom`` per id would release the GIL on every call, and
#: measured, hand it to the cache's writer thread each time.
_rng = random.Random(os.urandom(32))
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: _rng.seed(os.urandom(32)))


class IdMaker:
    """Makes strictly increasing ids; safe to share between threads.

    ``now_ms`` and ``random_bits`` are injectable so a simulated run makes
    the same ids from the same seed (pass a seeded ``random.Random().getrandbits``
    and a function of the virtual clock).
    """

    def __init__(
        self,
        now_ms: Callable[[], int] = _wall_ms,
        random_bits: Callable[[int], int] | None = None,
    ) -> None:
        self._now_ms = now_ms
        self._random_bits = random_bits or _rng.getrandbits
        self._lock = threading.Lock()
        self._ms = -1
        self._counter = 0

    def __call__(self) -> bytes:
        with self._lock:
            ms = int(self._now_ms())
            if ms > self._ms:
                self._ms, self._counter = ms, self._random_bits(_SEED_BITS)
            elif self._counter < _COUNTER_MAX:
                self._counter += 1
            else:  # 2**72 ids in one millisecond, or the wall went back: borrow the next one
                self._ms, self._counter = self._ms + 1, self._random_bits(_SEED_BITS)
            return _pack(self._ms, self._counter)


def _pack(ms: int, counter: int) -> bytes:
    high = counter >> 62  # 12 bits
    low = counter & ((1 << 62) - 1)
    value = (ms & 0xFFFF_FFFF_FFFF) << 80 | 0x7 << 76 | high << 64 | 0b10 << 62 | low
    return value.to_bytes(ID_SIZE, "big")


#: The process's own maker: every publisher in a process draws from it, so
#: its ids never repeat and never go back within the process.
new_id: Callable[[], bytes] = IdMaker()


def check_id(value: object) -> bytes:
    """``value`` as a 16-byte id, or ValueError saying what is wrong with it."""
    if isinstance(value, (bytearray, memoryview)):
        value = bytes(value)
    if not isinstance(value, bytes):
        raise ValueError(f"a message id is 16 bytes, got {type(value).__name__}")
    if len(value) != ID_SIZE:
        raise ValueError(f"a message id is 16 bytes, got {len(value)}")
    return value


def id_time(value: bytes) -> float:
    """The wall time (seconds since the epoch) an id was made at."""
    return int.from_bytes(value[:6], "big") / 1000.0


def id_hex(value: bytes) -> str:
    """An id as people read it: the UUID form."""
    return str(uuid.UUID(bytes=bytes(value)))
