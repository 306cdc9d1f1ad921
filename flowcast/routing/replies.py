"""The reply book: which answers an estate may send back without a policy rule.

A sender whose policy lets nobody in must still hear that its own message
was denied or failed at the far end, and a ``read`` must get its ``value``.
So a message a flow sends opens a narrow way back: error reports to the
source share for ``REPLY_WINDOW`` seconds, and one ``value`` per ``read``.
Only messages a flow sent are written here (the router's own reports and
answers carry reply tags and expect nothing), so a remote cannot earn
itself a way in by provoking an error.  Split from the router, which only
asks the two questions below.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any

from flowcast.routing.route import Route

__all__ = ["ReplyBook", "REPLY_WINDOW", "MAX_ERROR_PARCEL"]

REPLY_WINDOW = 300.0
#: An error report larger than this is not taken as a reply.
MAX_ERROR_PARCEL = 16 << 10


class ReplyBook:
    """Route pairs that may be answered, by (estate, channel, yard, share) of the sender."""

    def __init__(self, clock: Callable[[], float], manor: str, counts: MutableMapping[str, int], bound: int) -> None:
        self._clock = clock
        self._manor = manor
        self._counts = counts
        self._bound = bound
        self._pairs: dict[tuple[str, str, str, str], Any] = {}

    def expect(self, pair: Any, tag: str) -> None:
        """``pair`` carried a message a flow sent: its destination may answer for a while."""
        now = self._clock()
        if pair.errors_until - now < REPLY_WINDOW / 2:
            pair.errors_until = now + REPLY_WINDOW
        if tag == "read":
            pair.reads += 1
        key = (pair.dst.estate, pair.dst.channel, pair.src.yard, pair.src.share)
        if self._pairs.get(key) is not pair:
            if len(self._pairs) >= self._bound:
                self._pairs.clear()  # bounded; senders re-register on their next message
                self._counts["expect_resets"] += 1
            self._pairs[key] = pair

    def is_reply(self, remote: str, channel: str, dst: Route, tag: str, size: int) -> bool:
        """May this message from ``remote`` pass as an answer, without a policy rule?"""
        pair = self._pairs.get((remote, channel, dst.yard or self._manor, dst.share))
        if pair is None:
            return False
        if tag == "value":
            if pair.reads <= 0:
                return False
            pair.reads -= 1
            return True
        return size <= MAX_ERROR_PARCEL and pair.errors_until >= self._clock()
