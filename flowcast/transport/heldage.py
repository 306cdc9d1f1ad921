"""A link's held entries in order of last progress, for eviction and expiry at a cost per entry dropped.

The hold budget (budget.py) drops, from a peer over its share, what made
no progress for longest, and expires incomplete messages that made none
for ``incomplete_after``.  Both used to list and sort every entry the
peer held, so each eviction cost the victim time in proportion to what
the attacker held (0.7 s of CPU per honest 200 KB message under three
attackers).  Here each link keeps a heap of ``(when, tick, id, state,
key)``: pushed once when an entry is made (a new incomplete message, or a
whole one held out of order), never touched on the receive path.

* *Lazy re-keying.*  An incomplete message's ``last`` moves with every
  piece, but its heap key is its ``last`` when pushed.  A popped entry whose
  message has progressed since is pushed again under its real ``last``:
  each re-push answers at least one piece received, so what is dropped is
  still the least recently progressed, at O(log n) per piece, amortised.
* *Lazy deletion.*  Entries delivered, completed or replaced stay in the
  heap until popped: an entry is live only while its holder still has, at
  its key, the very object it was pushed for (compared by ``id``: no
  reference is kept, so a delivered message is never pinned).  Were an id
  reused by a new object at the same key, that object is genuinely held
  there: the cost is an eviction order off by one entry, never wrong books.
* *Bounded.*  Every heap entry, live or stale, is charged ``AGE_COST`` to
  the link (its ``books``, inside the hold budget), and the heap is rebuilt
  from its live entries when it grows to twice what was live at the last
  rebuild (plus 64): O(1) per push, amortised, and never more stale
  entries than were live.

Whole messages held out of order are keyed ``inf``: they go after every
incomplete one, oldest first, and never expire (a gap's sender resends).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Any, Protocol

from flowcast.transport.holding import AGE_COST, Partial, StreamIn

__all__ = ["AGE_COST", "INF", "AgedLink", "push", "live", "oldest", "next_due", "clear"]

INF = float("inf")
_REBUILD_SLACK = 64


class AgedLink(Protocol):
    """What these functions use of a link (receiver.py keeps the state)."""

    ages: list[tuple[float, int, int, StreamIn | None, Any]]
    ages_at: int
    age_tick: int
    books: int
    partials_unreliable: dict[tuple[int, int], Partial]

    def book(self, delta: int) -> None: ...


def push(link: AgedLink, when: float, state: StreamIn | None, key: Any, item: Any) -> None:
    """``item`` is now held at ``key`` of ``state`` (None: the unreliable partials)."""
    ages = link.ages
    if len(ages) >= link.ages_at:
        _rebuild(link)
        ages = link.ages
    tick = link.age_tick = link.age_tick + 1
    heapq.heappush(ages, (when, tick, id(item), state, key))
    link.book(AGE_COST)


def _holder(link: AgedLink, state: StreamIn | None) -> dict:
    return link.partials_unreliable if state is None else state.pending


def live(link: AgedLink, entry: tuple[float, int, int, StreamIn | None, Any]) -> Any:
    """The object ``entry`` stands for, if it is still held; else None."""
    item = _holder(link, entry[3]).get(entry[4])
    return item if item is not None and id(item) == entry[2] else None


def _rebuild(link: AgedLink) -> None:
    """Keep the live entries only; the stale ones' books are given back."""
    ages = link.ages
    kept = [entry for entry in ages if live(link, entry) is not None]
    heapq.heapify(kept)
    gone = len(ages) - len(kept)
    link.ages = kept
    link.ages_at = 2 * len(kept) + _REBUILD_SLACK
    if gone:
        link.book(-gone * AGE_COST)


def oldest(link: AgedLink, upto: float = INF) -> Iterator[tuple[StreamIn | None, Any, Any]]:
    """Live entries, least recently progressed first, as (state, key, item), while their progress is at most ``upto``.

    Each one yielded has left the heap (its books given back): the caller
    drops it from its holder, or stops asking.  Stale entries are popped on
    the way; progressed ones are re-keyed.
    """
    ages = link.ages
    while ages:
        entry = ages[0]
        when = entry[0]
        if when > upto:
            return
        item = live(link, entry)
        if item is not None and type(item) is Partial and item.last > when:
            heapq.heapreplace(ages, (item.last, entry[1], entry[2], entry[3], entry[4]))
            continue
        heapq.heappop(ages)
        link.book(-AGE_COST)
        if item is not None:
            yield entry[3], entry[4], item


def next_due(link: AgedLink) -> float | None:
    """The earliest progress time of an incomplete message held (a lower bound), or None."""
    ages = link.ages
    if not ages or ages[0][0] == INF:
        return None
    return ages[0][0]


def clear(link: AgedLink) -> None:
    """Forget every entry (the link's session is going); their books are given back."""
    if link.ages:
        link.book(-len(link.ages) * AGE_COST)
    link.ages = []
    link.ages_at = _REBUILD_SLACK
