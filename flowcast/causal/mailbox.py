"""The mailbox: causal delivery of one subscription, with no I/O and no copies (docs/causal.md, "The mailbox").

Why no copies: Local Storage already holds every message, so the mailbox
keeps only hashes -- the delivered set, and for each buffered message the
count of deps it still waits for -- and hands back the storage locator
(``seq``) or whatever ``item`` the caller passed.  The caller reads the
bytes back when a buffered message becomes deliverable.

Why the caller does the I/O: the same object runs under the relay in a
house, in the property tests with random graphs, and in the bench against
a bare topological sort, so what it costs per delivery is what it computes.

Bounds: buffered messages are capped per publisher and per topic; an offer
over a cap is *deferred* -- the mailbox keeps its storage seq under one dep
it waits for (flowcast/causal/deferred.py), and :meth:`Mailbox.due` hands
back the deferred messages worth offering again: those whose dep was just
delivered or rejected, and, when there is room, each publisher's oldest.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from flowcast.causal.deferred import Deferred, Parked

__all__ = ["Buffered", "DEFERRED", "DELIVERED", "DUPLICATE", "BUFFERED", "Mailbox", "REJECTED", "Ready"]

DELIVERED = "delivered"
BUFFERED = "buffered"
DEFERRED = "deferred"
DUPLICATE = "duplicate"
REJECTED = "rejected"


class Ready(NamedTuple):
    """A message to hand to the subscribers now; ``lag`` is the seconds it spent buffered (0 if none)."""

    hash: bytes
    publisher: bytes
    epoch: int
    seq: int
    item: Any
    lag: float


class Buffered:
    """A buffered message: what it waits for, and where it is stored.

    A message naming one dep (a chain's next) keeps that hash itself, not a
    tuple of it: 48 bytes less for each message a flood makes a mailbox hold.
    """

    __slots__ = ("hash", "publisher", "epoch", "_deps", "seq", "item", "waiting", "since")

    def __init__(self, hash: bytes, publisher: bytes, epoch: int, deps: tuple[bytes, ...], seq: int, item: Any,
                 waiting: int, since: float) -> None:
        self.hash = hash
        self.publisher = publisher
        self.epoch = epoch
        self._deps: bytes | tuple[bytes, ...] = deps[0] if len(deps) == 1 else deps
        self.seq = seq
        self.item = item
        self.waiting = waiting
        self.since = since

    @property
    def deps(self) -> tuple[bytes, ...]:
        deps = self._deps
        return (deps,) if deps.__class__ is bytes else deps  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"Buffered({self.hash[:6].hex()}, e{self.epoch}, waiting={self.waiting})"


class Mailbox:
    """Delivered and buffered hashes of one subscription; delivers each hash once, after its deps."""

    def __init__(self, *, max_buffered: int = 10_000, max_per_publisher: int = 1_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if max_buffered < 1 or max_per_publisher < 1:
            raise ValueError(f"the buffer caps are at least 1, got {max_buffered}, {max_per_publisher}")
        self.max_buffered = max_buffered
        self.max_per_publisher = max_per_publisher
        self.clock = clock
        #: epoch -> delivered hashes (the epoch's causal history here)
        self.delivered: dict[int, set[bytes]] = {}
        #: epoch -> delivered hashes no delivered message names yet (insertion-ordered)
        self.heads: dict[int, dict[bytes, None]] = {}
        self.buffered: dict[bytes, Buffered] = {}
        #: dep hash -> the buffered message waiting for it, or a list of them (one is the common case: a chain)
        self.waiters: dict[bytes, Buffered | list[Buffered]] = {}
        #: hash -> (epoch, reason): never delivered; what names it is rejected too
        self.rejected: dict[bytes, tuple[int, str]] = {}
        self.per_publisher: Counter[bytes] = Counter()
        #: messages deferred over a cap, each under one dep it waits for (``len``: how many now)
        self.deferred = Deferred()
        #: deferred messages whose dep was delivered or rejected since :meth:`due` was last asked
        self.woken: list[Parked] = []
        self._turn = 0  # which publisher gets the first share of room that comes back
        #: buffered messages rejected while releasing others (a dep of another epoch), with the reason:
        #: the caller reports them (and clears the list)
        self.swept: list[tuple[Buffered, str]] = []
        self.counts: Counter[str] = Counter()

    # -- offering -------------------------------------------------------------

    def offer(self, hash: bytes, publisher: bytes, epoch: int, deps: tuple[bytes, ...], seq: int = 0,
              item: Any = None) -> tuple[str, list[Ready]]:
        """Take a message that passed both predicates: its status, and what is deliverable now, in order.

        The list holds the message itself first when it was deliverable,
        then every buffered message it unblocked (transitively).  A
        rejected outcome's list is empty; :meth:`reject` reports the
        dependents it took with it.
        """
        done = self.delivered.get(epoch)
        if done is None:
            done = self.delivered[epoch] = set()
            self.heads[epoch] = {}
        if hash in done or hash in self.buffered:
            self.counts[DUPLICATE] += 1
            return DUPLICATE, []
        if hash in self.rejected:
            self.counts[DUPLICATE] += 1
            return REJECTED, []
        waiting = 0
        rejected = self.rejected
        for dep in deps:
            if dep in done:
                continue
            if dep in rejected:
                self.reject(hash, "dep_rejected", epoch)  # and what is buffered waiting for it
                return REJECTED, []
            waiting += 1
        if waiting == 0:
            ready = [Ready(hash, publisher, epoch, seq, item, 0.0)]
            self._deliver(hash, epoch, deps, done)
            self._release(hash, epoch, ready)
            return DELIVERED, ready
        if self.per_publisher[publisher] >= self.max_per_publisher or len(self.buffered) >= self.max_buffered:
            on = next(dep for dep in deps if dep not in done)
            self.deferred.park(hash, publisher, epoch, seq, on)
            self.counts[DEFERRED] += 1  # deferrals; len(self.deferred) is the messages deferred now
            return DEFERRED, []
        entry = Buffered(hash, publisher, epoch, deps, seq, item, waiting, self.clock())
        self.buffered[hash] = entry
        self.per_publisher[publisher] += 1
        waiters = self.waiters
        for dep in deps:
            if dep not in done:
                found = waiters.get(dep)
                if found is None:
                    waiters[dep] = entry
                elif found.__class__ is list:
                    found.append(entry)
                else:
                    waiters[dep] = [found, entry]
        self.counts[BUFFERED] += 1
        return BUFFERED, []

    def _deliver(self, hash: bytes, epoch: int, deps: tuple[bytes, ...], done: set[bytes]) -> None:
        if self.deferred.on:
            self.woken.extend(self.deferred.wake(hash))
        done.add(hash)
        heads = self.heads[epoch]
        for dep in deps:
            heads.pop(dep, None)
        heads[hash] = None
        self.counts[DELIVERED] += 1

    def _release(self, hash: bytes, epoch: int, ready: list[Ready]) -> None:
        """Deliver, breadth first, every buffered message that waited only for ``hash`` (and so on)."""
        waiters = self.waiters
        found = waiters.pop(hash, None)
        if found is None:
            return
        queue = [(_listed(found), epoch)]
        now = self.clock()
        buffered = self.buffered
        per_publisher = self.per_publisher
        position = 0
        while position < len(queue):
            entries, dep_epoch = queue[position]
            position += 1
            for entry in entries:
                if entry.hash not in buffered:
                    continue  # rejected meanwhile
                if entry.epoch != dep_epoch:
                    self.swept.extend((gone, "cross_epoch" if gone is entry else "dep_rejected")
                                      for gone in self.reject(entry.hash, "cross_epoch", entry.epoch))
                    continue
                entry.waiting -= 1
                if entry.waiting:
                    continue
                del buffered[entry.hash]
                per_publisher[entry.publisher] -= 1
                done = self.delivered[entry.epoch]
                self._deliver(entry.hash, entry.epoch, entry.deps, done)
                ready.append(Ready(entry.hash, entry.publisher, entry.epoch, entry.seq, entry.item, now - entry.since))
                more = waiters.pop(entry.hash, None)
                if more is not None:
                    queue.append((_listed(more), entry.epoch))

    # -- rejecting ------------------------------------------------------------

    def reject(self, hash: bytes, reason: str, epoch: int = 0) -> list[Buffered]:
        """Mark ``hash`` rejected; returns the buffered messages that go with it (``hash`` itself if buffered, then its dependents)."""
        gone: list[Buffered] = []
        todo = [(hash, reason, epoch)]
        while todo:
            h, why, e = todo.pop()
            if h in self.rejected or h in self.delivered.get(e, ()):
                continue
            entry = self.buffered.pop(h, None)
            if entry is not None:
                e = entry.epoch
                self.per_publisher[entry.publisher] -= 1
                self._unwait(entry)
                gone.append(entry)
            self.rejected[h] = (e, why)
            self.counts[f"rejected_{why}"] += 1
            if self.deferred.on:  # offered again, they are rejected too
                self.woken.extend(self.deferred.wake(h))
            for waiter in _listed(self.waiters.pop(h, [])):
                if waiter.hash in self.buffered:
                    todo.append((waiter.hash, "dep_rejected", waiter.epoch))
        return gone

    def undeliver(self, hash: bytes, epoch: int, reason: str) -> None:
        """A message this mailbox released that the caller could not hand over (it expired from storage):
        it counts as rejected, so what names it later is rejected too, never delivered before it."""
        done = self.delivered.get(epoch)
        if done is not None:
            done.discard(hash)
        heads = self.heads.get(epoch)
        if heads is not None:
            heads.pop(hash, None)
        self.rejected[hash] = (epoch, reason)
        self.counts[f"rejected_{reason}"] += 1
        if self.deferred.on:
            self.woken.extend(self.deferred.wake(hash))
        # what is still buffered naming it no longer waits for it (it was released): reject it now
        for entry in [e for e in self.buffered.values() if hash in e.deps]:
            self.swept.extend((gone, "dep_expired") for gone in self.reject(entry.hash, "dep_expired", entry.epoch))

    def _unwait(self, entry: Buffered) -> None:
        """Take a message that leaves the buffer off the waiter lists of its deps."""
        for dep in entry.deps:
            found = self.waiters.get(dep)
            if found is entry:
                del self.waiters[dep]
            elif found.__class__ is list and entry in found:
                found.remove(entry)
                if not found:
                    del self.waiters[dep]

    # -- asking ---------------------------------------------------------------

    def waiting_for(self, dep: bytes) -> list[Buffered]:
        """The buffered messages waiting for ``dep``."""
        return _listed(self.waiters.get(dep, []))

    def is_delivered(self, hash: bytes, epoch: int) -> bool:
        return hash in self.delivered.get(epoch, ())

    def waited(self) -> list[bytes]:
        """Hashes some buffered message waits for that are not buffered here: fetch or read them."""
        buffered = self.buffered
        return [h for h in self.waiters if h not in buffered]

    def missing_of(self, entry: Buffered) -> list[bytes]:
        """The deps ``entry`` still waits for."""
        done = self.delivered.get(entry.epoch, ())
        return [d for d in entry.deps if d not in done]

    def frontier(self, epoch: int, limit: int = 64) -> list[bytes]:
        """Delivered hashes of ``epoch`` that no delivered message names yet: the newest ``limit``."""
        heads = self.heads.get(epoch)
        if not heads:
            return []
        keys = list(heads)
        return keys[-limit:]

    def due(self) -> list[Parked]:
        """Take out the deferred messages worth offering again now, for the caller to read back and offer.

        Those whose dep was delivered or rejected since the last call (one
        of them may be deliverable, which needs no room), then, while there
        is room, the oldest of each publisher with room, the room shared
        between them in turn.  Offered again, each is delivered, buffered,
        or deferred again under its next missing dep: never a busy loop.
        """
        out, self.woken = self.woken, []
        deferred = self.deferred
        room = self.max_buffered - len(self.buffered)
        if not deferred.count or room <= 0:
            return out
        publishers = list(deferred.by_publisher)
        start = self._turn % len(publishers)
        self._turn += 1
        share = -(-room // len(publishers))
        for publisher in publishers[start:] + publishers[:start]:
            if room <= 0:
                break
            took = deferred.oldest(publisher, min(share, room, self.max_per_publisher - self.per_publisher[publisher]))
            room -= len(took)
            out.extend(took)
        return out

    # -- epochs ---------------------------------------------------------------

    def close_epoch(self, epoch: int) -> list[Buffered]:
        """Forget ``epoch``: returns its buffered messages, now abandoned (never delivered)."""
        abandoned = [e for e in self.buffered.values() if e.epoch == epoch]
        for entry in abandoned:
            del self.buffered[entry.hash]
            self.per_publisher[entry.publisher] -= 1
        for entry in abandoned:
            self._unwait(entry)
        now = self.clock()
        abandoned.extend(Buffered(p.hash, p.publisher, epoch, (), p.seq, None, 0, now) for p in self.deferred.drop_epoch(epoch))
        self.woken = [p for p in self.woken if p.epoch != epoch]
        self.counts["abandoned"] += len(abandoned)
        self.delivered.pop(epoch, None)
        self.heads.pop(epoch, None)
        for h in [h for h, (e, _why) in self.rejected.items() if e == epoch]:
            del self.rejected[h]
        return abandoned

    def epochs(self) -> list[int]:
        return sorted(set(self.delivered) | {e.epoch for e in self.buffered.values()})

    def load(self, epoch: int, delivered: Iterable[bytes], heads: Iterable[bytes] = ()) -> None:
        """Restore ``epoch``'s delivered set (after a restart), before anything is offered."""
        done = self.delivered.setdefault(epoch, set())
        done.update(delivered)
        h = self.heads.setdefault(epoch, {})
        for head in heads:
            h[head] = None

    def stats(self) -> dict[str, Any]:
        return {
            "delivered": sum(len(s) for s in self.delivered.values()),
            "buffered": len(self.buffered),
            "waited": len(self.waited()),
            "rejected": len(self.rejected),
            "deferred": len(self.deferred),
            "deferred_publishers": len(self.deferred.by_publisher),
            "counts": dict(self.counts),
        }


def _listed(found: Buffered | list[Buffered]) -> list[Buffered]:
    return found if found.__class__ is list else [found]  # type: ignore[return-value]
