"""The turn's outbox: publishes that commit with the acknowledgements of the turn that made them.

Why: a behaviour that consumes an order and publishes its confirmation
must do both or neither.  ``house.cast.publish(..., turn=True)`` stages
the publish; the turn's end writes it into the inbox's ``outbox`` table in
the same transaction as the acknowledgements and the durable tables
(``Inbox.settle``), and only then sends it to the cache.  After a kill -9
either the order is acknowledged and its confirmation is in the outbox, or
neither; a confirmation in the outbox is sent again when the house starts,
under the id it was given when staged, so the cache's dedupe stores it
once however often it is sent.  A row leaves the outbox once the cache
has it (acknowledged, a duplicate included) or refused it for good (a bad
name, too large: what no resend can change).  Any other failure (the
cache's house unreachable while it restarts, busy, full) is sent again a
second later, for as long as it takes: what the turn committed is never
dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

__all__ = ["Outbox", "OutboxTicket"]

#: (id, name, publisher, recipients (space-separated, '' for public), data)
Row = tuple[bytes, str, str, str, bytes]
#: Refusals no resend can change: the publish ends with them.
FINAL = frozenset({"bad_name", "foreign_prefix", "too_large", "bad_data", "bad_recipients"})
RETRY_AFTER = 1.0


class Sent(Protocol):
    """What a publish returns (the cache's Ticket, a RemoteTicket)."""

    done: bool
    seq: int
    duplicate: bool
    error: BaseException | None


class OutboxTicket:
    """A publish staged in a turn: ``done`` once the cache has it (or refused it), as any ticket."""

    __slots__ = ("id", "done", "seq", "duplicate", "error", "committed")

    def __init__(self, id: bytes) -> None:
        self.id = id
        self.done = False
        self.seq = 0
        self.duplicate = False
        self.error: BaseException | None = None
        self.committed = False  # in the outbox on disk


class Outbox:
    """Staged publishes of this house; ``send(name, data, id, publisher, recipients)`` publishes one."""

    def __init__(self, send: Callable[[str, bytes, bytes, str, Sequence[str] | None], Sent], now: Callable[[], float],
                 reason: Callable[[BaseException], str]) -> None:
        self._send = send
        self._now = now
        self._reason = reason
        self._staged: list[tuple[Row, OutboxTicket]] = []
        self._sending: list[tuple[Row, OutboxTicket, Sent]] = []
        self._again: list[tuple[float, Row, OutboxTicket]] = []  # (when, row, ticket): failed, sent again then
        self.counts = {"sent": 0, "resent": 0, "refused": 0}

    def __len__(self) -> int:
        return len(self._staged) + len(self._sending) + len(self._again)

    def stage(self, row: Row) -> OutboxTicket:
        ticket = OutboxTicket(row[0])
        self._staged.append((row, ticket))
        return ticket

    def staged_rows(self) -> list[Row]:
        """Rows to write in this turn's commit (they stay staged until :meth:`committed`)."""
        return [row for row, _ticket in self._staged]

    def committed(self) -> None:
        """The turn's commit has them: send each now."""
        staged, self._staged = self._staged, []
        for row, ticket in staged:
            ticket.committed = True
            self._start(row, ticket)

    def resume(self, rows: list[Row]) -> None:
        """Rows found in the outbox when the house started: sent again under their ids."""
        for row in rows:
            ticket = OutboxTicket(row[0])
            ticket.committed = True
            self._start(row, ticket)

    def finished(self) -> list[bytes]:
        """Ids whose publish ended (stored, or refused for good): their rows may go.  Their tickets
        complete here; a publish that failed otherwise is sent again once RETRY_AFTER has passed."""
        if self._again:
            now = self._now()
            due = [entry for entry in self._again if entry[0] <= now]
            if due:
                self._again = [entry for entry in self._again if entry[0] > now]
                for _when, row, ticket in due:
                    self.counts["resent"] += 1
                    self._start(row, ticket)
        done: list[bytes] = []
        if not self._sending:
            return done
        still = []
        for row, ticket, sent in self._sending:
            if not sent.done:
                still.append((row, ticket, sent))
            elif sent.error is not None and self._reason(sent.error) not in FINAL:
                self._again.append((self._now() + RETRY_AFTER, row, ticket))
            else:
                ticket.seq, ticket.duplicate, ticket.error, ticket.done = sent.seq, sent.duplicate, sent.error, True
                self.counts["refused" if sent.error is not None else "sent"] += 1
                done.append(row[0])
        self._sending = still
        return done

    def _start(self, row: Row, ticket: OutboxTicket) -> None:
        id, name, publisher, recipients, data = row
        try:
            sent = self._send(name, data, id, publisher, recipients.split() or None)
        except Exception as error:  # noqa: BLE001 - checked when staged; a refusal now is final or tried again
            if self._reason(error) in FINAL:  # its row goes, and its ticket completes, at the next finished()
                self._sending.append((row, ticket, _Ended(error)))
            else:
                self._again.append((self._now() + RETRY_AFTER, row, ticket))
            return
        self._sending.append((row, ticket, sent))


class _Ended:
    """A send refused before it had a ticket."""

    __slots__ = ("done", "seq", "duplicate", "error")

    def __init__(self, error: BaseException) -> None:
        self.done = True
        self.seq = 0
        self.duplicate = False
        self.error: BaseException | None = error
