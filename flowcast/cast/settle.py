"""The end of a turn in a subscribing house: acknowledgements, durable tables and the outbox, in one commit.

Why one object for the three: exactly-once effects need the
acknowledgement of what a turn consumed, what it wrote to its tables and
what it published to be one transaction (flowcast.cast.table, outbox).

Why a turn that only acknowledged commits a moment later: "acknowledged
when the turn ends" should mean a message taken in a turn that ended
never comes again, not "within a second"; but a commit of its own costs
~40 us of CPU, once per turn, which a live stream's small turns feel.  So
such a turn asks its owner for a zero-delay timer: in the same pass of the
scheduler, its acknowledgements ride with the arrivals' commit if
batches came meanwhile (:meth:`take_acks`), else they commit alone.  A
turn that wrote a table or published commits at once, acknowledgements
and all (both or neither).

Why ranges: a subscription acknowledged in order (the usual case, ``ack:
turn`` with a FIFO reader) deletes ``seq <= upto`` in one statement instead
of one per message.  Only when nothing older is still owed on disk: the
owner says which subscriptions still have older rows to hand over again.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

from flowcast.cast.inbox import Inbox
from flowcast.cast.outbox import Outbox
from flowcast.cast.table import Table
from flowcast.store.handoff import Handoff

__all__ = ["Settler"]

log = logging.getLogger("flowcast.cast")

Acks = list[tuple[bytes, int]]
Ranges = dict[bytes, int]


class Settler:
    """What the turns of one house acknowledged, wrote and published, until committed to ``inbox``.

    ``handoffs``: sid -> Handoff (the owner's, read here); ``older_owed(sid)``:
    True while the owner still has rows of ``sid`` from before a restart to hand
    over again (no range delete may reach them).
    """

    def __init__(self, inbox: Inbox, handoffs: dict[bytes, Handoff], older_owed: Callable[[bytes], bool],
                 counts: Counter[str], soon: Callable[[], None]) -> None:
        self.inbox = inbox
        self.soon = soon  # asks the owner to call commit() or take_acks() in this pass of the scheduler
        self.handoffs = handoffs
        self.older_owed = older_owed
        self.counts = counts
        self.tables: dict[str, Table] = {}
        self.outbox: Outbox | None = None
        self._acks: Acks = []
        self._ranges: Ranges = {}
        self._rows: list[tuple[str, bytes, bytes | None]] = []
        self._published: list[bytes] = []  # outbox rows whose publish ended, to delete (kept across a failed commit)
        #: a commit failed: what it held (acknowledgements, table writes, publishes) now commits only together
        self._failed = False

    def table(self, name: str) -> Table:
        table = self.tables.get(name)
        if table is None:
            table = self.tables[name] = Table(name, self.inbox)
        return table

    def turn_end(self) -> None:
        """A turn ended: what it settled, wrote and published, committed."""
        self._collect()
        for table in self.tables.values():
            self._rows.extend(table.staged())
        outbox = self.outbox
        publishes = outbox.staged_rows() if outbox is not None else []
        if outbox is not None and len(outbox):
            self._published.extend(outbox.finished())
        if self._rows or publishes or self._published:
            self.commit(publishes)
        elif self._acks or self._ranges:
            self.soon()

    def commit(self, publishes: list[Any] | None = None) -> bool:
        """Everything pending, in one transaction; False (kept for the next try) if it failed.

        After a failed commit its acknowledgements go only with its table writes
        (restaged in the tables) and its publishes (still staged in the outbox),
        whoever calls: the tick, a subscribe, the next turn's end.
        """
        if self._failed:
            for table in self.tables.values():
                self._rows.extend(table.staged())
            if publishes is None and self.outbox is not None:
                publishes = self.outbox.staged_rows()
        acks, ranges, rows, published = self._acks, self._ranges, self._rows, self._published
        if not (acks or ranges or rows or publishes or published):
            return True
        try:
            self.inbox.settle(acks, rows, publishes or [], published, ranges)
        except Exception:  # noqa: BLE001 - still owed on disk: tried again next turn, redelivered after a restart
            log.warning("CAST inbox %s: %d acknowledgements and %d table changes not recorded; trying again next turn",
                        self.inbox.path, len(acks) + len(ranges), len(rows), exc_info=True)
            self.counts["settle_failed"] += 1
            for name, key, value in rows:  # still what the flow reads, and staged for the next try
                self.table(name).restage(key, value)
            self._rows = []
            self._failed = True
            return False
        self.counts["acked"] += len(acks) + len(ranges)
        self._acks, self._ranges, self._rows, self._published = [], {}, [], []
        self._failed = False
        if publishes and self.outbox is not None:
            self.outbox.committed()
        return True

    def pending(self, sid: bytes) -> tuple[set[int], int]:
        """What of ``sid`` is acknowledged and not committed yet: single seqs, and every seq up to the second."""
        return {seq for s, seq in self._acks if s == sid}, self._ranges.get(sid, -1)

    def take_acks(self) -> tuple[Acks, Ranges]:
        """The pending acknowledgements, for the owner's commit to carry; :meth:`put_back` if it failed.
        None after a failed commit: those go with their writes and publishes (:meth:`commit`)."""
        if self._failed:
            return [], {}
        acks, ranges = self._acks, self._ranges
        self._acks, self._ranges = [], {}
        return acks, ranges

    def put_back(self, acks: Acks, ranges: Ranges) -> None:
        self._acks.extend(acks)
        for sid, upto in ranges.items():
            self._ranges[sid] = max(upto, self._ranges.get(sid, upto))

    def _collect(self) -> None:
        for sid, handoff in self.handoffs.items():
            if not len(handoff):
                continue
            keys = handoff.settled()
            if not keys:
                continue
            top = max(keys)
            oldest = handoff.oldest()
            if handoff.explicit or self.older_owed(sid) or (oldest is not None and oldest < top):
                self._acks.extend((sid, seq) for seq in keys)
            else:  # nothing at or below ``top`` is owed any more: one range
                self._ranges[sid] = max(top, self._ranges.get(sid, top))
