"""HandshakeRate: what unauthenticated datagrams may cost a road in public-key work.

A HELLO, an INITIATE or a JOIN each cost an X25519 or Ed25519 operation
(40-70 µs) before anything is known about the sender, so a flood of them,
garbage or not, could take the stack's thread.  The road spends that work
from token buckets: one for the stack, ``rate`` operations a second, and
one per source address, a tenth of that, so one flooding address cannot
starve everyone else's handshakes.  Sessions are untouched: sealed packets
never come here.
"""

from __future__ import annotations

from collections import Counter

from flowcast.runtime.tokenbucket import TokenBucket
from flowcast.transport.port import Address

__all__ = ["HandshakeRate", "SOURCES"]

#: Source addresses remembered; the least recently heard is forgotten first.
SOURCES = 4096


class HandshakeRate:
    """The stack's bucket and one per source address (a tenth of the rate each)."""


    def __init__(self, rate: float, now: float, places: dict[Address, int], counts: Counter[str]) -> None:
        self.rate = float(rate)
        self.bucket = TokenBucket(self.rate, max(1.0, self.rate), at=now)
        self._per_source: dict[Address, TokenBucket] = {}  # least recently heard first
        self._places = places  # the stack's: address -> how many remotes are there
        self._counts = counts

    @property
    def low(self) -> bool:
        """Under a quarter of the stack's bucket left: the join gate asks every JOIN for a cookie."""
        return self.bucket.tokens < self.rate / 4

    def afford(self, now: float, address: Address = None) -> bool:
        """May a datagram from ``address`` have its public-key work done now?  (Spends a token of each bucket.)"""
        per = self._per_source
        mine = per.pop(address, None)
        if mine is None:
            share = self.rate / 10
            mine = TokenBucket(share, max(1.0, share), at=now)  # below 1 it would never grant one
        if len(per) >= SOURCES:
            per.pop(next(iter(per)))  # the least recently heard source is forgotten
        per[address] = mine
        if not mine.take(now):
            self._counts["rate_limited"] += 1
            return False
        if not self.bucket.take(now):
            # Under a flood, addresses where known remotes were heard (or were
            # configured) keep their own per-source share: a flood from many
            # strangers cannot lock out the estates this one already knows.
            if address in self._places:
                return True
            self._counts["rate_limited"] += 1
            return False
        return True
