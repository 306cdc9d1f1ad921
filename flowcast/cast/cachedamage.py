"""What the cache does with a stored message whose checksum no longer holds: report it, never serve it.

Why apart from cache.py: the cache reads; this decides how loudly a
damaged row is said, and to whom.  Each damaged seq is said once per open
(an error log line, a count in ``Cache.stats()['damaged']``, a call to
every ``Cache.on_damaged`` listener -- the publisher counts it in its
status and its ``damaged`` hook), however many reads pass over it; the
subscribers that pass over it are told by the publisher with a
``cast.gap`` over its seq (publisher.py), never by silence.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from flowcast.cast.cachesum import checksum

__all__ = ["Damage", "intact"]

log = logging.getLogger("flowcast.cast.cache")

#: Distinct damaged seqs remembered (and logged one by one); past it they are counted, logged once more.
REMEMBER = 10_000


def intact(id: Any, name: Any, publisher: Any, stamp: Any, recipients: Any, data: Any, crc: Any) -> bool:
    """True if a row's served fields still give its ``crc`` (a field damaged into another type does not)."""
    try:
        return checksum(id, name, publisher, stamp, recipients, data) == crc
    except (TypeError, ValueError, AttributeError):
        return False


class Damage:
    """The damaged seqs one open of a cache has met, and who is told about them."""

    def __init__(self, path: object) -> None:
        self.path = path
        self.seqs: set[int] = set()
        self.count = 0
        self.listeners: list[Callable[[int], Any]] = []

    def found(self, seq: int) -> None:
        """Row ``seq`` failed its checksum: say so the first time, count it, tell the listeners."""
        if seq in self.seqs:
            return
        if len(self.seqs) < REMEMBER:
            self.seqs.add(seq)
            log.error("the CAST cache %s: message seq %d is damaged (its checksum does not match); it is not served,"
                      " subscribers passing it get a cast.gap over it", self.path, seq)
        elif len(self.seqs) == REMEMBER:
            self.seqs.add(seq)
            log.error("the CAST cache %s: more than %d damaged messages; counting the rest without a line each",
                      self.path, REMEMBER)
        self.count += 1
        for listener in list(self.listeners):
            try:
                listener(seq)
            except Exception:  # noqa: BLE001 - a failing listener must not stop the read
                log.exception("CAST cache damage listener %r failed", listener)
