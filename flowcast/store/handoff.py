"""Hand-offs: messages a durable store pushed into a queue share, owed until the flow has taken them.

Why this exists: a subscription's inbox (CAST) or ledger (causal) used to
commit "delivered" and then push into an in-memory queue share, so a house
killed between the commit and its flow's next turn lost what sat in the
queue.  Now the durable side keeps each message as *owed* until the flow
acknowledges it, and this object tells it when that happened.

What "acknowledged" means, by default, is *the turn that took it ended*: a
behaviour took the message off the queue (``popleft``, ``clear``, ``take``,
anything), and the house's turn (one skedder tick, ``Store.end_turn``)
completed.  The common case needs no code: a behaviour that handles what it
takes within its turn is acknowledged after it, never before.  A consumer
that keeps a message across turns (a generator behaviour, a batch it works
on later) asks for ``explicit`` acknowledgement and calls :meth:`ack` when
done.  Either way, after a crash the owner hands over again exactly what was
not acknowledged, flagged ``redelivered`` so the flow can recognise it.

How "taken" is found without a hook on the deque: the owed items are kept
in push order, and a queue share is FIFO, so if the oldest owed item is
still at the queue's head nothing of ours was taken (the usual case costs
one identity check); otherwise the queue's items are looked up by identity.
Whatever left the queue counts as taken.  A reader that takes from the tail
(``pop``) while our oldest item stays at the head is seen late, when the
head goes: later acknowledgement, redelivery after a crash, never a loss.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from typing import Any

from flowcast.store.share import QueueShare

__all__ = ["Handoff"]


class Handoff:
    """Items pushed into ``queue`` under a ``key`` each, owed until taken (and acknowledged).

    ``explicit``: taking is not enough, the consumer calls :meth:`ack`.
    The owner calls :meth:`settled` at the end of each turn and commits
    what it returns; until then those keys stay owed on its disk.
    """

    __slots__ = ("queue", "_explicit", "_owed", "_acked", "_keys", "_held")

    def __init__(self, queue: QueueShare, *, explicit: bool = False) -> None:
        self.queue = queue
        self._owed: deque[tuple[Any, Hashable]] = deque()  # (item, key), push order
        self._acked: set[Hashable] = set()  # explicit acks not yet settled
        self._keys: set[Hashable] = set()  # keys owed, for ack by key: explicit mode only (a set insert per push costs)
        #: taken under explicit mode before the subscription changed to implicit: the consumer still holds
        #: them, so only its ack settles them (push order: older than anything in ``_owed``)
        self._held: dict[Hashable, None] = {}
        self._explicit = explicit

    @property
    def explicit(self) -> bool:
        return self._explicit

    @explicit.setter
    def explicit(self, explicit: bool) -> None:
        """A subscription made again may change its mode: what is owed stays owed either way.

        From explicit to implicit, what the consumer took and has not acked is
        still in its hands: it stays owed until acked, not until a turn ends.
        """
        if self._explicit and not explicit and self._owed:
            present = {id(item) for item in self.queue.queue}
            self._held.update((key, None) for item, key in self._owed if id(item) not in present)
            self._owed = deque(pair for pair in self._owed if id(pair[0]) in present)
            self._acked.intersection_update(self._held)  # acked while still queued: settled when taken now
        self._explicit = explicit
        self._keys = self.keys() if explicit else set()

    def keys(self) -> set[Hashable]:
        """The keys owed now."""
        return {key for _item, key in self._owed} | self._held.keys()

    def __len__(self) -> int:
        """Items owed: pushed, not yet settled."""
        return len(self._owed) + len(self._held)

    def room(self) -> int:
        """How many more items the queue takes now (its bound less what it holds); large when unbounded."""
        queue = self.queue
        return queue.bound - len(queue.queue) if queue.bound else 1 << 62

    def push(self, item: Any, key: Hashable, size: int = 0, *, force: bool = False) -> bool:
        """Push ``item`` and owe it; False (nothing owed) when the queue refused it.

        ``force``: past the queue's bound (a notice that must not be the one
        dropped, such as a gap): appended all the same, watchers told.
        """
        queue = self.queue
        if force and queue.bound and len(queue.queue) >= queue.bound:
            queue.queue.append(item)
            for watcher in queue.watchers:
                watcher(queue)
        elif not queue.push(item, size):
            return False
        self._owed.append((item, key))
        if self._explicit:
            self._keys.add(key)
        return True

    def oldest(self) -> Any:
        """The key pushed first of those still owed (None when nothing is)."""
        if self._held:
            return next(iter(self._held))
        return self._owed[0][1] if self._owed else None

    def owes(self, key: Hashable) -> bool:
        return key in self._keys or key in self._held if self._explicit else key in self.keys()

    def ack(self, key: Hashable) -> bool:
        """The consumer is done with ``key`` (explicit mode, or held from it; harmless otherwise). False if not owed here."""
        if key not in self._keys and key not in self._held:
            return False
        self._acked.add(key)
        return True

    def settled(self) -> list[Hashable]:
        """Keys acknowledged since the last call, in push order, and no longer owed.

        Implicit mode: every item no longer in the queue.  Explicit mode:
        every item acked, taken or not (a consumer may ack what it peeked).
        """
        held: list[Hashable] = []
        if self._held and self._acked:
            held = [key for key in self._held if key in self._acked]
            for key in held:
                del self._held[key]
            self._acked.difference_update(held)
        owed = self._owed
        if not owed:
            return held
        if self.explicit:
            if not self._acked:
                return held
            acked = self._acked
            done = [key for _item, key in owed if key in acked]
            self._owed = deque(pair for pair in owed if pair[1] not in acked)
            self._acked = set()
        else:
            queue = self.queue.queue
            if queue and queue[0] is owed[0][0]:
                return held  # the oldest owed item is still first: nothing of ours was taken
            if not queue:
                done = [key for _item, key in owed]
                owed.clear()
            else:
                present = {id(item) for item in queue}
                done = [key for item, key in owed if id(item) not in present]
                if not done:
                    return held
                self._owed = deque(pair for pair in owed if id(pair[0]) in present)
        done = held + done
        if self._explicit:
            self._keys.difference_update(done)
        return done

    def forget(self) -> list[Hashable]:
        """Stop owing everything (the subscription closed): the keys, still unacknowledged on disk."""
        keys = [*self._held, *(key for _item, key in self._owed)]
        self._held.clear()
        self._owed.clear()
        self._keys.clear()
        self._acked.clear()
        return keys

