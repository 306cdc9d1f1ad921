"""One byte budget for what a stack's sessions hold before delivery.

A link holds messages that arrived out of order and pieces of messages
not yet whole (reliable.py), and its books: the state of every stream the
peer named and the entries of its age heap (heldage.py).  Each link has its
own hold limit, but under ``once``/``always`` any key gets a session, so a
per-session limit alone lets a few peers pin hundreds of MB.  The stack
therefore gives all its links one :class:`HoldBudget`.

Fair shares are over *sessions*, not over the links holding something at
the moment: every session has a guaranteed ``floor`` of ``limit`` over the
number of sessions.  When shares divided by current holders, three
attackers regained the honest peer's share each time it held nothing, and
every honest message paid for evicting it back.  Now:

* a link within its floor is always given room -- from free space, else by
  evicting the links furthest over their floors down to it;
* a link over its floor may grow only while the budget leaves one floor
  free (``soft``, the limit less one floor): an idle session's room is kept
  for it, so the next honest message finds room without evicting anything;
* anything else is refused (the packet stays unacknowledged, so an honest
  sender resends it later), counted ``refused``.

Evicted data was acknowledged, so the sender's message does not complete:
the receiver tells it (evicted.py) and it fails with reason ``evicted`` --
counted, never silent.  Stream states and heap entries are books, counted
but never evicted: a peer that names too many streams is refused its next
new one.

Incomplete messages also expire ``incomplete_after`` seconds (at most a
quarter more) after their last new piece -- the sweep runs from the
link's timers -- so what a peer that went silent left behind does not
stay held until it comes back; the road reaps the silent session itself
after ``idle_after``.
"""

from __future__ import annotations

import weakref
from collections import Counter
from typing import Any

from flowcast.transport import evicted as _evicted
from flowcast.transport import heldage
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
    and ``books`` goes into ``used``; ``holders`` are the links holding
    anything evictable.  Links register as sessions when made
    (:meth:`join`) and leave when released; ``floor`` and ``soft`` follow.
    """

    __slots__ = ("limit", "used", "holders", "incomplete_after", "counts", "sessions", "floor", "soft", "__weakref__")

    def __init__(self, limit: int = DEFAULT_HOLD_BUDGET, *, incomplete_after: float = DEFAULT_INCOMPLETE_AFTER) -> None:
        if limit < 1 << 16:
            raise ValueError("a hold budget under 64 KiB cannot hold one datagram")
        if not incomplete_after > 0:
            raise ValueError("incomplete_after must be positive")
        self.limit = int(limit)
        self.used = 0
        self.holders: dict[Any, None] = {}
        #: id(link) -> a weak reference to it: a link dropped without release leaves by itself.
        self.sessions: dict[int, weakref.ref] = {}
        self.floor = self.limit
        self.soft = self.limit
        self.incomplete_after = float(incomplete_after)
        #: refused: admissions refused (packets left unacknowledged); evicted /
        #: expired: entries dropped; evicted_bytes / expired_bytes: what they held.
        self.counts: Counter[str] = Counter()

    def join(self, link: Any) -> None:
        """``link`` is a session of this stack: it has a floor, and lowers everyone's."""
        key = id(link)
        budget = weakref.ref(self)

        def gone(ref: weakref.ref, key: int = key) -> None:
            owner = budget()
            if owner is not None and owner.sessions.get(key) is ref:
                del owner.sessions[key]
                owner._reshare()

        self.sessions[key] = weakref.ref(link, gone)
        self._reshare()

    def leave(self, link: Any) -> None:
        ref = self.sessions.get(id(link))
        if ref is not None and ref() is link:
            del self.sessions[id(link)]
            self._reshare()
        self.holders.pop(link, None)

    def _reshare(self) -> None:
        sessions = len(self.sessions)
        self.floor = self.limit // max(1, sessions)
        self.soft = self.limit - self.floor if sessions > 1 else self.limit

    def share(self, link: Any) -> int:
        """What ``link`` may plan to hold (its ACK window follows it): its floor, or more while few hold anything."""
        holders = len(self.holders) + (link not in self.holders)
        share = self.limit // holders
        return share if share > self.floor else self.floor

    def admit(self, link: Any, size: int) -> bool:
        """May ``link`` hold ``size`` more bytes?  Called only past ``soft``.

        A link within its floor gets room made by evicting from the links
        furthest over theirs -- all they hold beyond it, not just what is
        needed now, so the next pieces find room without another pass; one
        over its floor is refused.  An eviction costs what it drops
        (heldage.py), whatever else the evicted peer holds.
        """
        floor = self.floor
        if link.buffered + link.books + size > floor:
            if self.used + size <= self.soft:
                return True
            self.counts["refused"] += 1
            return False
        need = self.used + size - self.limit
        if need <= 0:
            return True
        over = [other for other in self.holders if other is not link and other.buffered + other.books > floor]
        over.sort(key=_held, reverse=True)
        for other in over:
            if need <= 0:
                break
            need -= evict(other, other.buffered + other.books - floor)
        if need > 0:
            self.counts["refused"] += 1
            return False
        return True


def _held(link: Any) -> int:
    return link.buffered + link.books


def _drop(link: Any, owner: Any, key: Any, item: Any) -> int:
    """Take ``item`` out of its holder; a stream's dict is copied once as many went as are left."""
    if owner is None:
        del link.partials_unreliable[key]
    else:
        pending = owner.pending
        del pending[key]
        dropped = owner.dropped = owner.dropped + 1
        if dropped > len(pending):
            # A dict keeps its table when entries go: the copy holds only what is left.
            # Once as many went as are left, so O(1) per entry dropped.
            owner.pending = dict(pending)
            owner.dropped = 0
    cost = held_cost(item)
    link.buffered -= cost
    return cost


def _notify(link: Any, dropped: list[tuple[Any, Any]]) -> None:
    """Reliable messages dropped from ``link`` (owner, seq): acknowledged pieces, never sent
    again, so their senders must hear (evicted.py); unreliable ones (owner None) need not."""
    for owner, key in dropped:
        if owner is not None:
            _evicted.note(link, owner.stream, key)


def evict(link: Any, need: int) -> int:
    """Drop ``link``'s held data, least recently progressed first, until ``need`` bytes are free."""
    freed = 0
    books = link.books
    dropped = []
    unreliable = False
    for owner, key, item in heldage.oldest(link):
        freed += _drop(link, owner, key, item)
        dropped.append((owner, key))
        unreliable = unreliable or owner is None
        if freed + books - link.books >= need:
            break
    _notify(link, dropped)
    if unreliable:
        link.partials_unreliable = dict(link.partials_unreliable)  # at most 64 entries
    freed += books - link.books  # the heap entries that went with them
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
    dropped = []
    freed = 0
    unreliable = False
    stray = []
    for owner, key, item in heldage.oldest(link, cutoff):
        if type(item) is not Partial:
            stray.append((owner, key, item))  # an id reused by a whole message: it goes back, keyed as one
            continue
        freed += _drop(link, owner, key, item)
        dropped.append((owner, key))
        unreliable = unreliable or owner is None
    for owner, key, item in stray:
        heldage.push(link, heldage.INF, owner, key, item)
    # an incomplete message's pieces held so far were acknowledged too: the same notice as evict's
    _notify(link, dropped)
    if unreliable:
        link.partials_unreliable = dict(link.partials_unreliable)
    dropped = len(dropped)
    if dropped:
        link.counts["expired"] = link.counts.get("expired", 0) + dropped
        budget.counts["expired"] += dropped
        budget.counts["expired_bytes"] += freed
    nearest = heldage.next_due(link)
    if nearest is None:
        return None
    # Not sooner than a quarter period from now: under a steady stream of new
    # incomplete messages each sweep would otherwise find the next one due a
    # moment later.  So one expires between incomplete_after and 1.25 times it
    # after its last piece.
    return max(nearest + after, now + after / 4)


def release(link: Any) -> int:
    """Drop everything ``link`` holds for delivery (its session is going); the bytes freed, books included."""
    freed = link.buffered + link.books
    link.partials_unreliable = {}
    for state in link.streams_in.values():
        state.pending = {}
    link.buffered = 0
    heldage.clear(link)
    link.book(-link.books)  # the streams' states go with the session
    budget = link.budget
    if budget is not None:
        budget.leave(link)
    return freed
