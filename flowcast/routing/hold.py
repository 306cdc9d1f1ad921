"""Hold: messages waiting at a manor for an estate that has not joined yet.

Split from the router so that what waits, and the bounds on it, are kept in
one place: the queues per (channel, estate) in arrival order, the count and
bytes of everything waiting, and the earliest deadline (:class:`Hold`, the
books, so a message leaving the hold by any path gives back its count and
its bytes); and the router's three steps around it -- :func:`hold` a parcel,
:func:`release` an estate's parcels when it joins, :func:`expire_held` those
that waited too long -- which answer refusals through the router's usual
path.
"""

from __future__ import annotations

from collections import deque
from functools import partial
from typing import Any

from flowcast.errors import ClosedError
from flowcast.routing.handlers import Refused

__all__ = ["Hold", "Held", "hold", "release", "expire_held", "refuse_held"]

#: One waiting parcel: (deadline, pair, tag, parcel, reliable, messages it stands for: more than 1 for a batch).
Held = tuple[float, Any, str, bytes, bool, int]


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
        self.count += entry[5]
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
        self.count -= entry[5]
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


def hold(router: Any, pair: Any, tag: str, parcel: bytes, reliable: bool, count: int) -> None:
    """Keep ``parcel`` (``count`` messages: more than 1 for a batch) until its estate joins (or its
    deadline); Refused if the hold will not take it."""
    dst = pair.dst
    size = len(parcel)
    limit = getattr(router.roads.get(dst.channel), "max_message", None)
    if limit is not None and size > limit:  # would wait only to fail at the join
        raise Refused(f"cannot send: message of {size} bytes exceeds the {limit}-byte limit", "too_large")
    held = router._held
    if router.hold_timeout <= 0 or held.count + count > router.hold_limit or held.bytes + size > router.hold_bytes:
        why = "" if router.hold_timeout <= 0 else (
            f" (and {held.count} messages, {held.bytes} bytes, already wait for estates to join)"
        )
        if router.hold_timeout > 0:
            router.counts["hold_full"] += count
        raise Refused(f"estate {dst.estate!r} is not known on channel {dst.channel!r}{why}", "no_remote")
    deadline = router.scheduler.clock.now() + router.hold_timeout
    held.add((dst.channel, dst.estate), (deadline, pair, tag, parcel, reliable, count))
    router.counts["held"] += count
    if router._hold_timer is None:
        router._hold_timer = router.scheduler.call_at(deadline, partial(expire_held, router))


def release(router: Any, channel: str, estate: str) -> None:
    """The estate joined: send what waited for it, in order.

    Each message on its own: one the road will not take is refused (and
    its sender told) while the rest go on, and every message leaving the
    hold gives its count and bytes back.
    """
    road = router.roads.get(channel)
    key = (channel, estate)
    held = router._held.take(key)
    if not held:
        return
    if road is None:  # no road to send them on: they wait, and expire as usual
        router._held.put_back(key, held)
        return
    while held:
        entry = held[0]
        _deadline, pair, tag, parcel, reliable, count = entry
        try:
            road.send_bytes(parcel, estate, stream=pair.stream, reliable=reliable)
            failed = None
        except KeyError:  # not known yet after all (a presence change of another kind)
            router._held.put_back(key, held)
            return
        except Exception as error:  # noqa: BLE001 - too large (ValueError) or refused by the road: this message only
            failed = error
        held.popleft()
        router._held.left(entry)
        if failed is not None:
            counter = "too_large" if isinstance(failed, ValueError) else "undelivered"
            if isinstance(failed, ClosedError):
                counter = "closed"
            refused = Refused(f"cannot send: {failed}", counter)
            refused.count = count
            router._refuse(pair, tag, refused)
            continue
        pair.count += count
        router.counts["to_road"] += 1
        router.counts["released"] += count


def expire_held(router: Any) -> None:
    """The hold's timer: refuse what waited too long, and wait for the next deadline."""
    router._hold_timer = None
    expired, first = router._held.due(router.scheduler.clock.now())
    for _deadline, pair, tag, _parcel, _reliable, count in expired:
        dst = pair.dst
        refused = Refused(f"estate {dst.estate!r} did not join channel {dst.channel!r} within {router.hold_timeout:g} s", "no_remote")
        refused.count = count
        router._refuse(pair, tag, refused)
    if first is not None:
        router._hold_timer = router.scheduler.call_at(first, partial(expire_held, router))


def refuse_held(router: Any, reason: str, kind: str = "stopped") -> int:
    """Refuse everything still waiting (the house is stopping); how many messages.

    Each through the router's usual path, so it is counted, noted and its
    sender told, like an expiry -- held parcels must not vanish with the house.
    """
    expired, _first = router._held.due(float("inf"))
    total = 0
    for _deadline, pair, tag, _parcel, _reliable, count in expired:
        refused = Refused(reason, kind)
        refused.count = count
        total += count
        router._refuse(pair, tag, refused)
    if router._hold_timer is not None:
        router._hold_timer.cancel()
        router._hold_timer = None
    return total
