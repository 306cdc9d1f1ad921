"""Publishing from a house that does not run the cache: every ticket ends.

Such a publish is a ``cast.pub`` sent down the lane to the cache's house,
and its ticket completes on the ``cast.puback``.  The lane cannot see
every loss: the cache's house takes the message from the lane (which
counts it delivered) and is killed before the cache commits it, and then
nobody will ever answer.  Waiting for ever would hold the flow's item for
ever, and enough of them stop the flow (CastPublish's ``MAX_PENDING``).

So this side keeps each open publish (the message it already holds, no
copy) and

* **sends it again by id** -- safe, because the cache dedupes ids over its
  whole retention and acknowledges a message it holds as ``duplicate``:
  at once when the cache's house has restarted since the last send (the
  lane hears a new boot id: the dead incarnation may have taken it), and
  otherwise after ``resend`` seconds without an answer, doubling each time
  up to ``RESEND_CAP`` times that -- and not at all while the cache's
  house answers publishes sent before this one and none after: it answers
  in the order of the lane's one stream, so this one is in its backlog (a
  cache that is merely slow is not flooded with copies).  A routed error naming no publish (the lane gave
  up on, or could not take, a message) is not a refusal: what was sent
  before it goes back to the first, shortest wait;
* **gives up** ``timeout`` seconds after the publish, refusing the ticket
  with the reason ``timeout``.  What that means is *unknown*, not *not
  stored*: the message may be in the cache under its id, so publishing it
  again under the same id can never store it twice.

Memory: the open tickets (at most ``max_open``) hold what they publish;
each resend lends the lane one more parcel of it, and there are at most
one per restart of the cache's house plus the back-off's few per timeout.

The clock is the house's scheduler, so on virtual time this is a trace of
the seed like everything else (tests/cast/test_publish_resend.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from flowcast.routing import Refused, Route

__all__ = ["RemotePublishes", "RemoteTicket", "MAX_OPEN", "RESEND_CAP", "WATCH"]

#: Open publishes at most; past it a publish is refused ``busy`` at once (the cache's own bound).
MAX_OPEN = 100_000
#: The back-off between resends stops doubling at this many times the first.
RESEND_CAP = 8
#: Seconds between looks, while publishes are open, at whether the cache's house restarted and
#: at what is due: how soon a restart is acted on and how late past its bound a ticket may end.
#: Four looks a second while something waits cost nothing; a house with nothing open has no timer.
WATCH = 0.25


class RemoteTicket:
    """A publish made through another house: ``done`` once that house says durable or refused, or time ran out."""

    __slots__ = ("id", "done", "seq", "duplicate", "error", "message", "deadline", "sent", "since", "place", "boot", "round", "sends")

    def __init__(self, id: bytes, message: dict[str, Any], deadline: float) -> None:
        self.id = id
        self.done = False
        self.seq = 0
        self.duplicate = False
        self.error: BaseException | None = None
        self.message = message
        self.deadline = deadline
        self.sent = 0.0  # when it was last sent
        self.place = 0  # which send that was, counted by the house: its place in the lane's one stream to the cache
        self.since = 0.0  # when its back-off wait started (its last send, or a wait made longer)
        self.boot: int | None = None  # the cache's house's lane boot id then
        self.round = 0  # resends made on the back-off
        self.sends = 0


class RemotePublishes:
    """The open publishes of one house, sent through ``router`` to the cache at ``cache_at`` from share ``src``.

    ``timeout``: seconds from publish to the ``timeout`` refusal.
    ``resend``: seconds without an answer before the first resend (then
    doubling up to ``RESEND_CAP`` times it).  Without a scheduler on the
    router nothing is resent and nothing times out (a bare router in a tool).
    """

    def __init__(self, router: Any, cache_at: Route, src: str, *, timeout: float, resend: float, max_open: int = MAX_OPEN) -> None:
        if not 0 < resend < timeout:
            raise ValueError(f"need 0 < resend < timeout, not resend {resend!r}, timeout {timeout!r}")
        self.router = router
        self.cache_at = cache_at
        self.src = src
        self.timeout = float(timeout)
        self.max_open = max_open
        self.intervals = _intervals(float(resend))
        self.counts: Counter[str] = Counter()
        self.scheduler = router.scheduler
        self._now: Callable[[], float] = self.scheduler.clock.now if self.scheduler is not None else (lambda: 0.0)
        #: Open tickets in publish order, which is deadline order.
        self.open: dict[bytes, RemoteTicket] = {}
        #: The same tickets by back-off round, each round in order of ``since``, which is due order.
        self._rounds: list[dict[bytes, RemoteTicket]] = [{} for _ in self.intervals]
        self._boot: int | None = None  # the cache's house's boot id at the last look
        self._failed_at: float | None = None  # the latest transport failure not yet acted on
        self._sent = 0  # sends made, counted: a ticket's ``place``
        self._answer_mark = 0  # the count of sends made when the cache's house last answered
        self._answered_place = 0  # the latest place it answered
        self._timer: Any = None
        self._closed = False

    # -- the service's calls ------------------------------------------------------------

    def publish(self, id: bytes, message: dict[str, Any]) -> RemoteTicket:
        """Send ``message`` (a checked ``cast.pub``) and keep it open until answered or out of time."""
        ticket = self.open.get(id)
        if ticket is not None:  # the same id again while it is open: one ticket, one answer
            return ticket
        if len(self.open) >= self.max_open:
            raise Refused(f"{self.max_open} publishes wait for the cache's house; publish again later", "busy")
        ticket = RemoteTicket(id, message, self._now() + self.timeout)
        self.open[id] = ticket
        self._send([ticket], self._now(), backoff=False)
        self._arm()
        return ticket

    def acked(self, id: bytes, seq: int, duplicate: bool) -> None:
        ticket = self._close(id)
        self._answered(ticket)
        if ticket is None:
            self.counts["late_acks"] += 1  # answered already (a resend's answer), or out of time before
            return
        ticket.seq, ticket.duplicate, ticket.done = seq, duplicate, True
        self.counts["acked"] += 1

    def refused(self, id: bytes, reason: str) -> None:
        """The cache's house refused it (cache full, a bad name...): that answer is final."""
        ticket = self._close(id)
        self._answered(ticket)
        if ticket is not None:
            self._end(ticket, reason, "refused")

    def transport_failed(self) -> None:
        """A routed error that names no publish (the lane gave up on a message, or could not take one).

        Never a refusal while time remains.  Which publish it was is not
        said, so every one sent before it goes back to the back-off's first
        round: sent again ``resend`` after its last send.
        """
        self.counts["transport_errors"] += 1
        self._failed_at = self._now()
        self._arm()

    def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- sending ----------------------------------------------------------------------------

    def _send(self, tickets: list[RemoteTicket], now: float, *, backoff: bool) -> None:
        """(Re)send ``tickets``: each moves to the end of its round (the next one, on the back-off)."""
        boot = self._cache_boot()
        last = len(self._rounds) - 1
        for ticket in tickets:
            if ticket.sends:
                self._rounds[ticket.round].pop(ticket.id, None)
                if backoff and ticket.round < last:
                    ticket.round += 1
            ticket.sent = ticket.since = now
            self._sent += 1
            ticket.place = self._sent
            ticket.boot = boot
            ticket.sends += 1
            self._rounds[ticket.round][ticket.id] = ticket
        send, at, src = self.router.send, self.cache_at, self.src
        for ticket in tickets:  # one by one: a tag with a handler never travels in a batch parcel
            send(at, ticket.message, src=src, tag="cast.pub")
        # A refusal at once (no lane, the yard unknown) comes back as a routed error naming no
        # publish (transport_failed): the ticket stays open, and the next look resends it.
        resent = sum(1 for t in tickets if t.sends > 1)
        if resent:
            self.counts["resent"] += resent

    def _cache_boot(self) -> int | None:
        lane = self.router.lane
        if lane is None:
            return None
        try:
            return lane.peer_boot(self.cache_at.yard)
        except KeyError:  # a yard the lane does not know: every send is refused, and times out
            return None

    # -- time ------------------------------------------------------------------------------

    def _arm(self) -> None:
        if self._timer is None and self.open and self.scheduler is not None and not self._closed:
            self._timer = self.scheduler.call_later(WATCH, self._look)

    def _look(self) -> None:
        """Out of time first, then what a restart or a failure lost, then what is due on the back-off."""
        self._timer = None
        now = self._now()
        while self.open:
            ticket = next(iter(self.open.values()))
            if ticket.deadline > now:
                break
            self._close(ticket.id)
            self._end(ticket, f"timeout: no answer from the cache's house {self.cache_at.yard!r} in {self.timeout:g} s "
                              f"after {ticket.sends} sends (it may hold the message under its id)", "timeouts")
        boot = self._cache_boot()
        if boot is not None and boot != self._boot:  # the cache's house restarted: what it had may be lost
            lost = [t for round in self._rounds for t in round.values() if t.boot != boot]
            if lost:
                self.counts["restart_resends"] += len(lost)
                self._send(sorted(lost, key=lambda t: t.deadline), now, backoff=False)
        self._boot = boot
        failed_at, self._failed_at = self._failed_at, None
        if failed_at is not None:
            self._hurry(failed_at)
        due: list[RemoteTicket] = []
        queued: list[RemoteTicket] = []
        for index, round in enumerate(self._rounds):
            interval = self.intervals[index]
            for ticket in round.values():
                if ticket.since + interval > now:
                    break
                # The cache's house answers in the order it was sent to (one lane stream, one writer):
                # answering since, but nothing sent after this one, it is working through a backlog
                # with this one in it -- a copy would only lengthen the backlog.  Silent, or past it:
                # this one may be lost, and goes again.
                behind = self._answer_mark >= ticket.place > self._answered_place
                (queued if behind else due).append(ticket)
        if due:
            self._send(due, now, backoff=True)
        if queued:
            self.counts["backlog_waits"] += len(queued)
            self._wait_more(queued, now)
        self._arm()

    def _answered(self, ticket: RemoteTicket | None) -> None:
        self._answer_mark = self._sent
        if ticket is not None and ticket.place > self._answered_place:
            self._answered_place = ticket.place

    def _wait_more(self, tickets: list[RemoteTicket], now: float) -> None:
        """Due, but queued at a cache that is answering: the next round's wait, counted from now, without a copy."""
        last = len(self._rounds) - 1
        for ticket in tickets:
            self._rounds[ticket.round].pop(ticket.id, None)
            ticket.round = min(ticket.round + 1, last)
            ticket.since = now
            self._rounds[ticket.round][ticket.id] = ticket

    def _hurry(self, failed_at: float) -> None:
        """Back to the first round, every ticket sent before a failure: its next resend is ``resend`` after its last wait began.

        Not at once: a lane that refuses every send (no such yard) would
        have each look send everything again.
        """
        first = self._rounds[0]
        moved = [t for round in self._rounds[1:] for t in round.values() if t.sent <= failed_at]
        if not moved:
            return
        for ticket in moved:
            self._rounds[ticket.round].pop(ticket.id)
            ticket.round = 0
        merged = sorted([*first.values(), *moved], key=lambda t: t.since)
        first.clear()
        first.update((t.id, t) for t in merged)

    # -- ending ----------------------------------------------------------------------------

    def _close(self, id: bytes) -> RemoteTicket | None:
        ticket = self.open.pop(id, None)
        if ticket is not None:
            self._rounds[ticket.round].pop(id, None)
            ticket.message = {}  # whoever published holds the data; a closed ticket need not
        return ticket

    def _end(self, ticket: RemoteTicket, reason: str, counter: str) -> None:
        self.counts[counter] += 1
        ticket.error = Refused(reason, "publish_refused")
        ticket.done = True


def _intervals(first: float) -> list[float]:
    """The back-off's waits: ``first`` doubling up to RESEND_CAP times it."""
    out = [first]
    while out[-1] * 2 <= first * RESEND_CAP:
        out.append(out[-1] * 2)
    return out
