"""What the peer relays' CAST feeds bring, taken in turns: between topics, then between publishers.

Why: every topic a peer relays arrives in one queue share per peer, and
draining it in arrival order made a flood on one topic (or by one
publisher) hold up everything queued behind it -- 100,000 messages of one
publisher took another topic from 43 ms to 11 s.  So what arrives is
sorted, without decoding, into one lane per (peer, topic) and, within a
lane, one line per publisher (the CAST item names both), and each pass
takes one message from each lane in turn, and within a lane from each
publisher in turn, at most ``per_pass`` messages before the house's other
work runs again.  A publisher with one message waiting waits for one
message of each other publisher, whatever they have queued.

Nothing here is held that the feed has not already handed over: the
messages were in the queue share, and they stay owed to the CAST
subscription (``ack="explicit"``) until the relay's store has them, so
CAST's own bounds on what a subscription may hold unacknowledged bound
what waits here; a stop leaves them owed, to be handed over again.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["Intake", "PER_PASS"]

log = logging.getLogger(__name__)

#: Messages from the peers' feeds offered to the relay in one pass (each costs a signature check).
PER_PASS = 64


class Scheduler(Protocol):
    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> Any: ...


class _Lane:
    """One (peer, topic): its publishers' messages, and whose turn is next."""

    __slots__ = ("peer", "lines", "turn")

    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.lines: dict[str, deque[dict[str, Any]]] = {}
        self.turn: deque[str] = deque()

    def put(self, publisher: str, item: dict[str, Any]) -> None:
        line = self.lines.get(publisher)
        if line is None:
            line = self.lines[publisher] = deque()
            self.turn.append(publisher)
        line.append(item)

    def take(self) -> dict[str, Any]:
        publisher = self.turn.popleft()
        line = self.lines[publisher]
        item = line.popleft()
        if line:
            self.turn.append(publisher)
        else:
            del self.lines[publisher]
        return item


class Intake:
    """Peer feeds sorted into lanes and offered in turns; ``offer(peer, item)`` gives one to the relay."""

    def __init__(self, scheduler: Scheduler, offer: Callable[[str, dict[str, Any]], Any], *, per_pass: int = PER_PASS) -> None:
        self.scheduler = scheduler
        self._offer = offer
        self.per_pass = max(1, per_pass)
        self._lanes: dict[tuple[str, str], _Lane] = {}
        #: lanes with something waiting, in turn order
        self._ready: deque[tuple[str, str]] = deque()
        self.waiting = 0
        self.bytes = 0
        self.counts: Counter[str] = Counter()
        self._timer: Any = None
        self._closed = False

    def put(self, peer: str, item: dict[str, Any]) -> None:
        """One CAST delivery from ``peer``'s feed, to be offered in its lane's turn."""
        name = item.get("name")
        topic = name.split("/causal/", 1)[-1] if isinstance(name, str) else ""
        publisher = item.get("publisher")
        key = (peer, topic)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane(peer)
        if not lane.lines:
            self._ready.append(key)
        lane.put(publisher if isinstance(publisher, str) else "", item)
        self.waiting += 1
        self.bytes += _size(item)
        if self._timer is None and not self._closed:
            self._timer = self.scheduler.call_later(0.0, self._pass)

    def _pass(self) -> None:
        """Offer up to ``per_pass`` messages, one per lane in turn; the rest on the next turn of the house."""
        self._timer = None
        if self._closed:
            return
        self.counts["passes"] += 1
        ready = self._ready
        for _ in range(self.per_pass):
            if not ready:
                break
            key = ready.popleft()
            lane = self._lanes[key]
            item = lane.take()
            if lane.lines:
                ready.append(key)
            else:
                del self._lanes[key]
            self.waiting -= 1
            self.bytes -= _size(item)
            self.counts["offered"] += 1
            try:
                self._offer(lane.peer, item)
            except Exception:  # noqa: BLE001 - still owed to the feed: handed over again after a restart
                self.counts["offer_failed"] += 1
                log.exception("causal: a message from %s could not be offered to the relay", lane.peer)
        if ready and self._timer is None and not self._closed:
            self._timer = self.scheduler.call_later(0.0, self._pass)

    def close(self) -> None:
        """Stop offering: what waits stays owed to the CAST subscriptions, handed over again after a restart."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._lanes.clear()
        self._ready.clear()
        self.waiting = self.bytes = 0

    def status(self) -> dict[str, int]:
        return {"waiting": self.waiting, "bytes": self.bytes, "lanes": len(self._lanes), **self.counts}


def _size(item: dict[str, Any]) -> int:
    data = item.get("data")
    return len(data) if isinstance(data, (bytes, bytearray)) else 0
