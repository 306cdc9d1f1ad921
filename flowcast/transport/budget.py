"""One byte budget for what a stack's sessions hold before delivery.

A link holds messages that arrived out of order and pieces of messages
not yet whole (reliable.py).  Each link has its own hold limit, but under
``once``/``always`` any key gets a session, so a per-session limit alone lets
a few peers pin hundreds of MB.  The stack therefore gives all its links
one :class:`HoldBudget`.  When the budget is full the peer that holds more
than its fair share (the budget over the number of peers holding anything)
pays: its new data is refused (the packet stays unacknowledged, so an honest
sender resends it later) and, when a peer within its share needs room, the
largest holders' incomplete and out-of-order data is evicted.  Evicted data
was acknowledged, so the sender's message does not complete: it fails by its
own timeout and the sender's router reports it -- counted, never silent.

Incomplete messages also expire ``incomplete_after`` seconds (at most a
quarter more) after their last new piece -- the sweep runs from the
link's timers -- so what a peer that went silent left behind does not
stay held until it comes back; the road reaps the silent session itself
after ``idle_after``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from flowcast.transport import evicted as _evicted
from flowcast.transport.holding import Partial, held_cost

__all__ = [
    "HoldBudget",
    "DEFAULT_HOLD_BUDGET",
    "DEFAULT_INCOMPLETE_AFTER",
    "DEFAULT_IDLE_AFTER",
    "DEFAULT_BACKLOG_MESSAGES",
    "DEFAULT_BACKLOG_BYTES",
]

#: Room for two 64 MiB messages in reassembly at once, plus windows of many peers.
DEFAULT_HOLD_BUDGET = 256 << 20
#: An incomplete message with no new piece for this long is dropped.
DEFAULT_INCOMPLETE_AFTER = 30.0
#: A session silent this long (no authentic packet; a live peer heartbeats every second) is reaped.
DEFAULT_IDLE_AFTER = 120.0
#: What waits for one remote that is down (road.py), in messages and bytes.
DEFAULT_BACKLOG_MESSAGES = 10_000
DEFAULT_BACKLOG_BYTES = 64 << 20


class HoldBudget:
    """Bytes held by every link of one stack, against one limit.

    Links keep these books themselves, in
    :meth:`~flowcast.transport.reliable.Link._charge` (it runs per
    datagram: no call here each time): each change of their ``buffered``
    goes into ``used``, and ``holders`` are the links holding anything,
    which is what a fair share divides by.
    """

    __slots__ = ("limit", "used", "holders", "incomplete_after", "counts")

    def __init__(self, limit: int = DEFAULT_HOLD_BUDGET, *, incomplete_after: float = DEFAULT_INCOMPLETE_AFTER) -> None:
        if limit < 1 << 16:
            raise ValueError("a hold budget under 64 KiB cannot hold one datagram")
        if not incomplete_after > 0:
            raise ValueError("incomplete_after must be positive")
        self.limit = int(limit)
        self.used = 0
        self.holders: dict[Any, None] = {}
        self.incomplete_after = float(incomplete_after)
        #: refused: admissions refused (packets left unacknowledged); evicted /
        #: expired: entries dropped; evicted_bytes / expired_bytes: what they held.
        self.counts: Counter[str] = Counter()

    def share(self, link: Any) -> int:
        holders = len(self.holders) + (link not in self.holders)
        return self.limit // holders

    def admit(self, link: Any, size: int) -> bool:
        """May ``link`` hold ``size`` more bytes?  Called only when the budget is exceeded.

        A link within its fair share gets room made by evicting from the
        links furthest over theirs -- all they hold beyond their share, not
        just what is needed now: an eviction sorts what a link holds, and a
        peer that must grow past its share again before the next one cannot
        make every arriving piece pay for a sort.  One over its share is refused.
        """
        share = self.share(link)
        if link.buffered + size > share:
            self.counts["refused"] += 1
            return False
        need = self.used + size - self.limit
        for other in sorted(self.holders, key=_buffered, reverse=True):
            if need <= 0:
                break
            if other is link or other.buffered <= share:
                continue
            need -= evict(other, other.buffered - share)
        if need > 0:
            self.counts["refused"] += 1
            return False
        return True


def _buffered(link: Any) -> int:
    return link.buffered


def _entries(link: Any) -> list[tuple[float, Any, Any, Any]]:
    """What ``link`` holds that may be dropped: (last progress, owner, key, item)."""
    out = []
    for key, entry in link.partials_unreliable.items():
        out.append((entry.last, None, key, entry))
    for state in link.streams_in.values():
        for seq, item in state.pending.items():
            if isinstance(item, Partial):
                out.append((item.last, state, seq, item))
            elif item[1] is not None:
                out.append((float("inf"), state, seq, item))  # complete, out of order: last to go
    return out


def _drop(link: Any, owner: Any, key: Any, item: Any) -> int:
    del (link.partials_unreliable if owner is None else owner.pending)[key]
    cost = held_cost(item)
    link.buffered -= cost
    return cost


def _compact(link: Any, owners: set) -> None:
    """A dict keeps its table when entries go: copies of the emptied ones hold only what is left."""
    for owner in owners:
        if owner is None:
            link.partials_unreliable = dict(link.partials_unreliable)
        else:
            owner.pending = dict(owner.pending)


def _notify(link: Any, dropped: list[tuple[Any, Any]]) -> None:
    """Reliable messages dropped from ``link`` (owner, seq): acknowledged pieces, never sent
    again, so their senders must hear (evicted.py); unreliable ones (owner None) need not."""
    stream_of = {id(state): stream for stream, state in link.streams_in.items()}
    for owner, key in dropped:
        if owner is not None:
            _evicted.note(link, stream_of[id(owner)], key)


def evict(link: Any, need: int) -> int:
    """Drop ``link``'s held data, least recently progressed first, until ``need`` bytes are free."""
    freed = 0
    dropped = []
    owners = set()
    for _, owner, key, item in sorted(_entries(link), key=lambda e: e[0]):
        if freed >= need:
            break
        freed += _drop(link, owner, key, item)
        owners.add(owner)
        dropped.append((owner, key))
    _notify(link, dropped)
    _compact(link, owners)
    dropped = len(dropped)
    link.counts["evicted"] = link.counts.get("evicted", 0) + dropped
    budget = link.budget
    if budget is not None:
        budget.counts["evicted"] += dropped
        budget.counts["evicted_bytes"] += freed
    return freed


def expire(link: Any, now: float) -> float | None:
    """Drop ``link``'s incomplete messages with no piece for ``incomplete_after``; the next sweep time."""
    budget = link.budget
    after = budget.incomplete_after
    cutoff = now - after
    nearest: float | None = None
    dropped = []
    freed = 0
    owners = set()
    for last, owner, key, item in _entries(link):
        if not isinstance(item, Partial):
            continue
        if last <= cutoff:
            freed += _drop(link, owner, key, item)
            owners.add(owner)
            dropped.append((owner, key))
        elif nearest is None or last < nearest:
            nearest = last
    # an incomplete message's pieces held so far were acknowledged too: the same notice as evict's
    _notify(link, dropped)
    _compact(link, owners)
    dropped = len(dropped)
    if dropped:
        link.counts["expired"] = link.counts.get("expired", 0) + dropped
        budget.counts["expired"] += dropped
        budget.counts["expired_bytes"] += freed
    if nearest is None:
        return None
    # Not sooner than a quarter period from now: under a steady stream of new
    # incomplete messages each sweep (a pass over them all) would otherwise
    # find the next one due a moment later.  So one expires between
    # incomplete_after and 1.25 times it after its last piece.
    return max(nearest + after, now + after / 4)


def release(link: Any) -> int:
    """Drop everything ``link`` holds for delivery (its session is going); the bytes freed."""
    freed = link.buffered
    link.partials_unreliable = {}
    for state in link.streams_in.values():
        state.pending = {}
    link.buffered = 0
    return freed
