"""Deadlines: when each remote next needs the road's attention, and what runs then.

Per remote: allow resends and timeout, its link's timers (resend,
delayed ACK), presence (dead after ``dead_after`` of silence), heartbeats
(``alive_interval``), reaping a session silent past ``idle_after``, and
the timeouts of messages in its backlog.

The deadlines sit in a heap of ``(when, n, remote)``; an entry is stale
when ``when != remote.due`` and is dropped lazily.  Remotes whose deadline
may have moved wait in the stack's ``_dirty`` (the hot path marks them;
this settles them), so a wake costs what it touches, not the number of
remotes.
"""

from __future__ import annotations

import heapq
import itertools
from typing import TYPE_CHECKING

from flowcast.transport.budget import release
from flowcast.transport.presence import Presence
from flowcast.transport.reliable import Link
from flowcast.transport.roadremote import Remote
from flowcast.transport.session import Session

if TYPE_CHECKING:
    from flowcast.transport.road import RoadStack

__all__ = ["Deadlines"]

_DEAD = Presence.DEAD


class Deadlines:
    """The per-remote timers of one road."""


    def __init__(self, stack: RoadStack) -> None:
        self.stack = stack
        self.heap: list[tuple[float, int, Remote]] = []
        self._n = itertools.count()
        # The stack's, held here too: next_deadline and maybe_due run at every wake.
        self._dirty = stack._dirty
        self._joins = stack._joins
        self._attempts = stack._joins.attempts

    def next_deadline(self) -> float | None:
        deadline = self._joins.next_deadline() if self._attempts else None
        if self._dirty:
            self.settle()
        heap = self.heap
        while heap:
            when, _, remote = heap[0]
            if remote.due == when:
                if deadline is None or when < deadline:
                    deadline = when
                break
            heapq.heappop(heap)  # stale: that remote's deadline moved (or it went)
        return deadline

    def maybe_due(self, now: float) -> bool:
        """Stack.service after reading: may a timer be due at ``now``?

        Without settling the remotes touched since (the round trip's reply
        is waiting): what reading sealed packets changes moves deadlines
        later or to a moment still ahead (a delayed ACK, a timeout), and
        the heap holds every remote's earlier deadline, stale or not.  What
        can make something due at once (a handshake packet, a new allow or
        session, a zero timeout) sets the stack's ``_urgent``: then all is settled.
        """
        stack = self.stack
        if stack._urgent or self._attempts:
            stack._urgent = False
            deadline = self.next_deadline()
            return deadline is not None and deadline <= now
        heap = self.heap
        return bool(heap) and heap[0][0] <= now

    def settle(self) -> None:
        """Recompute the deadlines of the remotes touched since; the heap gets the new ones."""
        stack = self.stack
        heap = self.heap
        count = self._n
        push = heapq.heappush
        for remote in self._dirty:
            when = self.remote_deadline(remote)
            if when != remote.due:
                remote.due = when
                if when is not None:
                    push(heap, (when, next(count), remote))
        self._dirty.clear()
        if len(heap) > 2 * len(stack.remotes) + 64:
            # Stale entries pile up under traffic (deadlines moving earlier):
            # rebuild from the live ones, O(n) once per O(n) pushes.
            heap[:] = [(r.due, next(count), r) for r in stack.remotes.values() if r.due is not None]
            heapq.heapify(heap)

    def remote_deadline(self, remote: Remote) -> float | None:
        """The earliest time anything of ``remote``'s is due (what ``remote_timers`` runs)."""
        stack = self.stack
        deadline: float | None = None
        alive_interval = stack.alive_interval
        allowing = remote.allowing
        if allowing is not None:
            when = min(allowing.next_send, allowing.deadline)
            if deadline is None or when < deadline:
                deadline = when
        session = remote.session
        if session is not None and session.remote_index is not None:
            when = session.link.next_deadline()
            if when is not None and (deadline is None or when < deadline):
                deadline = when
            last_heard = remote.last_heard
            last_sent = remote.last_sent
            quiet = last_sent if last_sent < last_heard else last_heard
            last_ping = remote.last_ping
            when = (quiet if quiet > last_ping else last_ping) + alive_interval
            if remote.presence is not _DEAD:
                dead = last_heard + stack.dead_after
                if dead < when:
                    when = dead
            elif (session.link.pending_count or remote.backlog) and allowing is None:
                when = min(when, remote.next_allow)
            if deadline is None or when < deadline:
                deadline = when
        elif remote.backlog and allowing is None and remote.address is not None:
            when = remote.next_allow
            if deadline is None or when < deadline:
                deadline = when
        if remote.backlog:
            for msg in remote.backlog:
                if msg.deadline is not None and (deadline is None or msg.deadline < deadline):
                    deadline = msg.deadline
        return deadline

    def timers(self, now: float) -> None:
        """Run everything due at ``now``: joins, then each remote whose deadline came."""
        stack = self.stack
        self._joins.timers(now)
        if self._dirty:
            self.settle()
        heap = self.heap
        due = []
        while heap and heap[0][0] <= now:
            when, _, remote = heapq.heappop(heap)
            if remote.due == when:  # else stale, or a copy of an entry taken already
                remote.due = None
                due.append(remote)
        dirty = self._dirty
        flushq = stack._flushq
        remotes = stack.remotes
        for remote in due:
            if remotes.get(remote.record.fingerprint) is not remote:
                continue
            self.remote_timers(remote, now)
            dirty[remote] = None
            flushq[remote] = None
        if now >= stack._sweep.at and stack._sessions:
            stack._sweep.run(stack, now)

    def remote_timers(self, remote: Remote, now: float) -> None:
        """Run what is due of ``remote``'s: allow resends and timeout, link timers, presence, heartbeat."""
        stack = self.stack
        allowing = remote.allowing
        if allowing is not None:
            if now >= allowing.deadline:
                stack._allows.failed(remote, now)
            elif now >= allowing.next_send and remote.address is not None:
                stack._emit(allowing.packet, remote.address)
                allowing.next_send = now + allowing.interval
                allowing.interval = min(allowing.interval * 2, 1.0)
        session = remote.session
        if session is not None and session.remote_index is not None:
            if now >= remote.last_heard + stack.idle_after:
                self.reap(remote, session, now)
                return
            link = session.link
            when = link.next_deadline()
            if when is not None and when <= now:
                link.poll(now)
            if remote.presence is not Presence.DEAD and now >= remote.last_heard + stack.dead_after:
                stack._set_presence(remote, Presence.DEAD)
                remote.next_allow = now
            if (
                remote.presence is Presence.DEAD
                and (link.pending_count or remote.backlog)
                and remote.allowing is None
                and now >= remote.next_allow
            ):
                stack._allows.start(remote, now)  # the peer may have restarted
            # same expression as remote_deadline(): a due timer must always make progress
            if now >= max(min(remote.last_sent, remote.last_heard), remote.last_ping) + stack.alive_interval:
                link.ping_owed = True
                remote.last_ping = now
                link.shrink()  # quiet for a heartbeat: empty send queues go
        elif remote.backlog and remote.allowing is None and now >= remote.next_allow:
            stack._allows.start(remote, now)
        if remote.backlog:
            self.expire_backlog(remote, now, "no session (timeout before allow)")

    def take_backlog(self, remote: Remote, link: Link, now: float) -> None:
        """What waited for ``remote`` goes into its session's link, in order."""
        backlog, remote.backlog = remote.backlog, []
        remote.backlog_bytes = 0
        watch = link.watch
        for msg in backlog:
            link.submit(msg, now)
            if watch is not None:
                watch.sent(msg)
        self.stack._touch(remote)

    def reap(self, remote: Remote, session: Session, now: float) -> None:
        """``remote`` was silent past ``idle_after``: its session goes, and what it held with it.

        Messages not yet delivered wait in the backlog for the next allow
        (within the backlog's bounds and their own timeouts); the peer, if it
        comes back, allows anew -- a reaped session id is unknown to this stack.
        """
        stack = self.stack
        stack._sessions.pop(session.local_index, None)
        remote.session = None
        link = session.link
        carried = link.take_unfinished()
        freed = release(link)
        remote.requeue(carried, front=True)
        remote.next_allow = now
        stack._starved.pop(remote, None)
        stack.counts["reaped"] += 1
        stack._set_presence(remote, _DEAD)
        stack._event_note(f"reaped {remote.name} session {session.local_index:08x}: silent {now - remote.last_heard:.0f} s, {freed} B held")
        self.expire_backlog(remote, now, "no session (timeout before allow)")

    def expire_backlog(self, remote: Remote, now: float, reason: str) -> None:
        """Messages waiting for ``remote`` past their deadline fail with ``reason``."""
        expired = [m for m in remote.backlog if m.deadline is not None and m.deadline <= now]
        if expired:
            remote.backlog = [m for m in remote.backlog if m.deadline is None or m.deadline > now]
            remote.backlog_bytes = sum(len(m.data) for m in remote.backlog)
            for msg in expired:
                self.stack._fail(msg, reason)
