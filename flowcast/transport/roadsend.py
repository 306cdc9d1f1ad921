"""A road's sending: a message in, to its remote's link or, while there is no session, its backlog.

Split from road.py, which had grown past what one reads at once; a mixin of
:class:`~flowcast.transport.road.RoadStack` (its state is the stack's).

Small messages have a path of their own: a 100-byte message's send was
three calls deep (``send_bytes``, ``_submit``, ``Link.submit``) and checked
what cannot be wrong for a message made there and then; made and queued in
one step (``Sender.submit_small``) it costs about 10% less CPU per message
(bench/road.py ``road_100B``).  Everything else -- unreliable, segmented,
bounded by retries or a burst, heard by a ``submitted`` listener, for a
remote with no session -- takes the general path.
"""

from __future__ import annotations

from time import monotonic as _monotonic
from typing import Any

from flowcast.transport.outgoing import Outgoing
from flowcast.transport.presence import Presence
from flowcast.transport.stack import F_RAW

__all__ = ["RoadSending", "BACKLOG_FULL", "SEND_QUEUE_FULL", "DEFAULT_SEND_QUEUE_BYTES"]

#: The reason of a message refused because its remote's backlog is full.
BACKLOG_FULL = "backlog full"
#: The reason of a message refused because what waits for its remote's live session is at its budget.
SEND_QUEUE_FULL = "send queue full"
#: Bytes of reliable messages that may wait for one remote with a session (queued, in flight or not
#: yet reported delivered), as the backlog does while it has none: a remote that reads slowly, or
#: advertises a closed window, would otherwise grow them for as long as senders send.
DEFAULT_SEND_QUEUE_BYTES = 64 << 20

_DEAD = Presence.DEAD
_NO_NAME = object()  # what the cache holds when it holds nothing: no caller's ``to`` is this object


class RoadSending:
    """``send_bytes`` and ``_submit`` of a RoadStack."""

    __slots__ = ()
    remotes: dict[str, Any]
    _by_name: dict[str, Any]
    #: The last send's ``to`` (the very object) and its remote: a sender's hot loop names one remote,
    #: and two dict looks (a name misses the fingerprints first) were ~4% of a 100-byte message's
    #: cost.  RemoteTable forgets it whenever a remote is added, renamed or dropped.
    _last_to: Any
    _last_remote: Any
    send_queue_bytes: int

    def _forget_last(self) -> None:
        """Forget the send path's cache (RemoteTable calls it when a remote is added, renamed or dropped)."""
        self._last_to = _NO_NAME
        self._last_remote = None

    def send_bytes(
        self,
        payload: bytes,
        to: str,
        *,
        stream: int = 0,
        timeout: float | None | type(...) = ...,
        retries: int | None = None,
        burst: int = 0,
        reliable: bool = True,
        _flags: int = F_RAW,
    ) -> Outgoing:
        """As :meth:`Stack.send_bytes`; a small reliable message to a remote with a session is made and
        queued in one step (Sender.submit_small), the rest take the general path."""
        if to is self._last_to:  # the same name object as the last send: its remote, looked up then
            remote = self._last_remote
        else:
            remote = self.remotes.get(to) or self._by_name.get(to)
            if remote is not None:
                self._last_to = to
                self._last_remote = remote
        if (
            remote is not None and reliable and retries is None and not burst and self.hooks.submitted is None
            and stream.__class__ is int and 0 <= stream <= 0xFFFF
        ):
            session = remote.session
            if (
                session is not None and session.remote_index is not None and remote.presence is not _DEAD and not self._closed
                and (session.link.pending_bytes + len(payload) <= self.send_queue_bytes or not session.link.pending_count)
            ):  # (over the send queue budget: the general path refuses it)
                if timeout is ...:
                    timeout = self.default_timeout
                origin = self._origin
                now = _monotonic() - origin if origin is not None else self.clock.now()  # RealClock.now, inline
                msg = session.link.submit_small(payload, stream, _flags, timeout, to, now)
                if msg is not None:
                    self._dirty[remote] = None
                    self._flushq[remote] = None
                    if timeout is not None and timeout <= 0:
                        self._urgent = True
                    event = self._event
                    if event is not None and not event._flag:
                        event.set()
                    return msg
        return super().send_bytes(payload, to, stream=stream, timeout=timeout, retries=retries, burst=burst, reliable=reliable, _flags=_flags)

    def _submit(self, msg: Outgoing, to: str) -> None:
        remote = self.remotes.get(to) or self._by_name.get(to) or self._find(to)
        now = self.clock.now()
        self._dirty[remote] = None
        self._flushq[remote] = None
        if msg.timeout is not None and not msg.flags & 0x01:
            msg.deadline = now + msg.timeout
            if msg.timeout <= 0:
                self._urgent = True
        session = remote.session
        if session is not None and session.remote_index is not None and remote.presence is not _DEAD:
            link = session.link
            if link.pending_count and not msg.flags & 0x01 and link.pending_bytes + len(msg.data) > self.send_queue_bytes:
                # What waits for this remote is at its budget: this one fails now, so its sender
                # hears (the router routes an error back), as when the backlog is full.  One message
                # alone always goes, whatever its size (max_message bounds it).
                self.counts["send_queue_full"] += 1
                self._fail(msg, SEND_QUEUE_FULL)
                return
            link.submit(msg, now)
        else:
            # No session, or the remote is down: the message waits in the
            # backlog, which is bounded (a dead remote's link would not be).
            size = len(msg.data)
            if size > self.max_message:
                raise ValueError(f"message of {size} bytes exceeds the {self.max_message}-byte limit")
            if len(remote.backlog) >= self.backlog_messages or (remote.backlog and remote.backlog_bytes + size > self.backlog_bytes):
                # The remote is down and enough waits for it already: this one
                # fails now, so its sender hears (the router routes an error back).
                self.counts["backlog_full"] += 1
                self._fail(msg, BACKLOG_FULL)
                return
            remote.backlog.append(msg)
            remote.backlog_bytes += size
            if remote.allowing is None:
                self._allows.start(remote, now)
