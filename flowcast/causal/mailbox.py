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
over a cap is *deferred* -- the mailbox remembers only the lowest storage
seq it deferred per publisher, and the caller offers from there again when
:meth:`Mailbox.resumable` says the publisher has room.  Memory is bounded
by the caps and the number of publishers, not by what arrives.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

__all__ = ["Buffered", "DEFERRED", "DELIVERED", "DUPLICATE", "BUFFERED", "Mailbox", "REJECTED", "Ready"]

#: Deps remembered per publisher for its deferred messages; past that, any delivery may unblock them.
MAX_DEFERRED_DEPS = 4096

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
    """A buffered message: what it waits for, and where it is stored."""

    __slots__ = ("hash", "publisher", "epoch", "deps", "seq", "item", "waiting", "since")

    def __init__(self, hash: bytes, publisher: bytes, epoch: int, deps: tuple[bytes, ...], seq: int, item: Any,
                 waiting: int, since: float) -> None:
        self.hash = hash
        self.publisher = publisher
        self.epoch = epoch
        self.deps = deps
        self.seq = seq
        self.item = item
        self.waiting = waiting
        self.since = since

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
        #: dep hash -> the buffered messages waiting for it
        self.waiters: dict[bytes, list[Buffered]] = {}
        #: hash -> (epoch, reason): never delivered; what names it is rejected too
        self.rejected: dict[bytes, tuple[int, str]] = {}
        self.per_publisher: Counter[bytes] = Counter()
        #: publisher -> lowest storage seq of a message deferred over a cap
        self.deferred: dict[bytes, int] = {}
        #: publisher -> deliveries counted when its first deferral since resumed: one after may unblock it
        self.deferred_at: dict[bytes, int] = {}
        #: publisher -> the deps its deferred messages wait for (None: more than MAX_DEFERRED_DEPS, not kept)
        self.deferred_deps: dict[bytes, set[bytes] | None] = {}
        #: dep hash -> the publishers with a deferred message waiting for it
        self.deferred_on: dict[bytes, set[bytes]] = {}
        #: publishers one of whose deferred messages' deps was delivered since: worth offering again
        self.deferred_hit: set[bytes] = set()
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
            low = self.deferred.get(publisher)
            if low is None or seq < low:
                self.deferred[publisher] = seq
            self.deferred_at.setdefault(publisher, self.counts[DELIVERED])
            self._defer_deps(publisher, deps, done)
            self.counts[DEFERRED] += 1
            return DEFERRED, []
        entry = Buffered(hash, publisher, epoch, deps, seq, item, waiting, self.clock())
        self.buffered[hash] = entry
        self.per_publisher[publisher] += 1
        waiters = self.waiters
        for dep in deps:
            if dep not in done:
                found = waiters.get(dep)
                if found is None:
                    waiters[dep] = [entry]
                else:
                    found.append(entry)
        self.counts[BUFFERED] += 1
        return BUFFERED, []

    def _defer_deps(self, publisher: bytes, deps: tuple[bytes, ...], done: set[bytes]) -> None:
        """Remember what a deferred message waits for, so that only delivering one of those makes the
        publisher worth re-reading (a flood naming ghosts then costs nothing per honest delivery)."""
        known = self.deferred_deps.setdefault(publisher, set())
        if known is None:
            return
        for dep in deps:
            if dep in done or dep in known:
                continue
            if len(known) >= MAX_DEFERRED_DEPS:
                self._forget_deferred_deps(publisher)
                self.deferred_deps[publisher] = None  # too many to keep: any delivery may unblock it
                return
            known.add(dep)
            on = self.deferred_on.get(dep)
            if on is None:
                self.deferred_on[dep] = {publisher}
            else:
                on.add(publisher)

    def _forget_deferred_deps(self, publisher: bytes) -> None:
        for dep in self.deferred_deps.pop(publisher, None) or ():
            on = self.deferred_on.get(dep)
            if on is not None:
                on.discard(publisher)
                if not on:
                    del self.deferred_on[dep]

    def _deliver(self, hash: bytes, epoch: int, deps: tuple[bytes, ...], done: set[bytes]) -> None:
        if self.deferred_on:
            hit = self.deferred_on.pop(hash, None)
            if hit is not None:
                self.deferred_hit.update(hit)
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
        queue = [(found, epoch)]
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
                    queue.append((more, entry.epoch))

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
            for waiter in self.waiters.pop(h, ()):
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
        # what is still buffered naming it no longer waits for it (it was released): reject it now
        for entry in [e for e in self.buffered.values() if hash in e.deps]:
            self.swept.extend((gone, "dep_expired") for gone in self.reject(entry.hash, "dep_expired", entry.epoch))

    def _unwait(self, entry: Buffered) -> None:
        """Take a message that leaves the buffer off the waiter lists of its deps."""
        for dep in entry.deps:
            found = self.waiters.get(dep)
            if found is not None and entry in found:
                found.remove(entry)
                if not found:
                    del self.waiters[dep]

    # -- asking ---------------------------------------------------------------

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

    def resumable(self) -> list[tuple[bytes, int]]:
        """(publisher, lowest deferred seq) for each publisher with deferred messages and room to buffer them now.

        Or, with no room, once a dep one of them waits for was delivered: it may
        now be deliverable, which needs no room -- and what fills the buffer
        may be waiting for exactly it.  (A publisher whose deferred deps were
        too many to remember: once anything was delivered since.)
        """
        room = len(self.buffered) < self.max_buffered
        delivered = self.counts[DELIVERED]
        return [(p, seq) for p, seq in self.deferred.items()
                if (room and self.per_publisher[p] < self.max_per_publisher) or p in self.deferred_hit
                or (self.deferred_deps.get(p, ()) is None and self.deferred_at.get(p, delivered) < delivered)]

    def resumed(self, publisher: bytes, seq: int | None) -> None:
        """The caller re-offered ``publisher``'s deferred messages up to the end (None) or deferred again from ``seq``."""
        if seq is None:
            self.deferred.pop(publisher, None)
            self.deferred_at.pop(publisher, None)
            self.deferred_hit.discard(publisher)
            self._forget_deferred_deps(publisher)
        else:
            self.deferred[publisher] = seq
            self.deferred_at.setdefault(publisher, self.counts[DELIVERED])

    # -- epochs ---------------------------------------------------------------

    def close_epoch(self, epoch: int) -> list[Buffered]:
        """Forget ``epoch``: returns its buffered messages, now abandoned (never delivered)."""
        abandoned = [e for e in self.buffered.values() if e.epoch == epoch]
        for entry in abandoned:
            del self.buffered[entry.hash]
            self.per_publisher[entry.publisher] -= 1
        for entry in abandoned:
            self._unwait(entry)
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
            "deferred_publishers": len(self.deferred),
            "counts": dict(self.counts),
        }
