"""Local Storage: the estate's CAST cache, holding causal messages under ``<estate>/causal/<topic>``.

Why the CAST cache and not a store of its own: it already makes a message
durable before anything acknowledges it, keeps it for the retention time,
and serves it to remote estates by subscription with cursors and resync.
A relay that stores a message there has therefore also forwarded it to
every peer relay subscribed to it -- the forwarding is CAST's, FIFO in
the cache's order, and survives either side's downtime.

This module only names things and moves bytes; what is worth storing is
the relay's decision.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from flowcast.causal.message import TopicMsg

__all__ = ["LocalStorage", "causal_name"]


def causal_name(estate: str, topic: str) -> str:
    """The CAST name an estate stores a topic's messages under."""
    return f"{estate}/causal/{topic}"


class LocalStorage:
    """Put wire bytes into the cache through the CAST publisher; read them back by seq."""

    def __init__(self, cast: Any, estate: str) -> None:
        publisher = getattr(cast, "publisher", None)
        if publisher is None:
            raise ValueError("the causal relay needs this house's CAST cache: run it in the house that holds the cache")
        self.publisher = publisher
        self.cache = publisher.cache
        self.estate = estate

    def put(self, msg: TopicMsg) -> Any:
        """Queue ``msg`` for the disk; the CAST ticket completes (``seq``) once durable."""
        return self.publisher.publish(causal_name(self.estate, msg.topic), msg.wire, publisher=msg.publisher.hex())

    def get(self, seqs: list[int]) -> dict[int, bytes]:
        """Wire bytes by seq; a seq whose message expired is absent."""
        return {seq: stored.data for seq, stored in self.cache.get(seqs).items()}

    def scan(self, topic: str | None = None, after: int = 0, limit: int = 1000) -> Iterator[tuple[int, bytes]]:
        """(seq, wire) of the stored messages of ``topic`` (all topics: None) after ``after``, in store order."""
        pattern = causal_name(self.estate, topic) if topic is not None else f"{self.estate}/causal/**"
        while True:
            read = self.cache.read(after, pattern=pattern, limit=limit)
            for stored in read:
                yield stored.seq, stored.data
            if read.upto <= after:
                return
            after = read.upto
