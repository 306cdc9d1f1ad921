"""Hold: messages waiting at a manor for an estate that has not joined yet.

Split from the router so that what waits, and the bounds on it, are kept in
one place: the queues per (channel, estate) in arrival order, the count and
bytes of everything waiting, and the earliest deadline.  The router decides
what to hold, what a release sends and how a refusal is answered; this only
keeps the books, so a message leaving the hold by any path gives back its
count and its bytes.
"""

from __future__ import annotations

from collections import deque
from typing import Any

__all__ = ["Hold", "Held"]

#: One waiting message: (deadline, pair, tag, parcel, reliable).
Held = tuple[float, Any, str, bytes, bool]


class Hold:
    """Queues of parcels per (channel, estate), with their total count and bytes."""

    def __init__(self) -> None:
        self._queues: dict[tuple[str, str], deque[Held]] = {}
        self.count = 0
        self.bytes = 0

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._queues

    def __bool__(self) -> bool:
        return bool(self._queues)

    def add(self, key: tuple[str, str], entry: Held) -> None:
        self._queues.setdefault(key, deque()).append(entry)
        self.count += 1
        self.bytes += len(entry[3])

    def take(self, key: tuple[str, str]) -> deque[Held] | None:
        """The queue for ``key``, out of the hold; :meth:`left` books each entry that leaves it."""
        return self._queues.pop(key, None)

    def put_back(self, key: tuple[str, str], queue: deque[Held]) -> None:
        """A taken queue (what is still in it) waits again."""
        if queue:
            self._queues[key] = queue

    def left(self, entry: Held) -> None:
        """``entry`` left the hold (sent, refused or expired): its count and bytes come back."""
        self.count -= 1
        self.bytes -= len(entry[3])

    def due(self, now: float) -> tuple[list[Held], float | None]:
        """The entries whose deadline has come (out of the hold), and the next deadline left."""
        expired: list[Held] = []
        first = None
        for key in list(self._queues):
            queue = self._queues[key]
            while queue and queue[0][0] <= now:
                entry = queue.popleft()
                self.left(entry)
                expired.append(entry)
            if queue:
                first = queue[0][0] if first is None else min(first, queue[0][0])
            else:
                del self._queues[key]
        return expired, first

    def sizes(self) -> dict[tuple[str, str], int]:
        return {key: len(queue) for key, queue in self._queues.items()}
