"""Message events of a stack's links: the EventSink protocol and each link's watch.

Kept apart from stack.py because recording is optional and separate from
running a stack: a stack with no sink never builds a LinkEvents, and a
link calls its watch only when one is set.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from flowcast.transport.wire import F_UNRELIABLE

__all__ = ["EventSink", "LinkEvents", "MAX_MISSED_PER_GAP"]


class EventSink(Protocol):
    """Where a stack records message events (``flowcast.export.Recorder`` is one).

    Declared here, not imported, because the transport must not depend on
    the layers above it: any object with these two methods will do.
    """

    def message(
        self,
        kind: str,
        msg_id: str,
        src: Any,
        dst: Any,
        size: int,
        latency: float | None = None,
        *,
        segment: int | None = None,
        lag: float | None = None,
        detail: str | None = None,
        share: str | None = None,
    ) -> None: ...

    def presence(self, remote: str, status: str, detail: str | None = None) -> None: ...


MAX_MISSED_PER_GAP = 64  # segment-missed events one arrival may report (a huge gap is not a flood of events)


class LinkEvents:
    """One link's facts (streams, sequence numbers) as message events for a sink.

    Exists only while a stack records, so a stack without a sink pays
    nothing: a :class:`~flowcast.transport.reliable.Link` calls it only
    when its ``watch`` is set.  Message ids are ``SENDER:TAG:STREAM:SEQ`` --
    ``TAG`` names the sender's session (road) or boot (lane), which both
    ends know, because sequence numbers start again with each.  Unreliable
    messages number apart from reliable ones: ``SENDER:TAG:STREAM:uSEQ``.
    Routes are ``("", yard, estate, stream)``: a road knows estates, a lane
    yards; the share part waits for routing.
    """

    __slots__ = ("sink", "now", "born", "tx", "rx", "local", "peer", "_routes", "_missed", "_pieces")

    def __init__(
        self,
        sink: EventSink,
        now: Callable[[], float],
        born: dict,
        tx: str,
        rx: str,
        local: tuple[str, str],
        peer: tuple[str, str],
    ) -> None:
        self.sink = sink
        self.now = now
        self.born = born  # the stack's: Outgoing -> [first send, msg id, src, dst]
        self.tx = tx  # id prefix of what this end sends
        self.rx = rx  # id prefix of what it receives
        self.local = local  # (yard, estate) of this end
        self.peer = peer
        self._routes: dict[tuple[int, bool], tuple[tuple, tuple]] = {}
        self._missed: dict[int, int] = {}  # stream -> highest sequence number reported missing
        self._pieces: dict[tuple[int, int], int] = {}  # (stream, seq) -> highest segment seen

    def _route(self, stream: int, outgoing: bool) -> tuple[tuple, tuple]:
        route = self._routes.get((stream, outgoing))
        if route is None:
            me = ("", *self.local, stream)
            them = ("", *self.peer, stream)
            route = self._routes[(stream, outgoing)] = (me, them) if outgoing else (them, me)
        return route

    # -- sender ------------------------------------------------------------

    def sent(self, msg: Any) -> None:
        """``msg`` entered this link (it has its sequence number now)."""
        seq = f"u{msg.seq}" if msg.flags & F_UNRELIABLE else msg.seq
        msg_id = f"{self.tx}:{msg.stream}:{seq}"
        src, dst = self._route(msg.stream, True)
        entry = self.born.get(msg)
        if entry is not None:
            entry[1:] = (msg_id, src, dst)
        self.sink.message("sent", msg_id, src, dst, len(msg.data))

    def resent(self, msg: Any, segment: int) -> None:
        src, dst = self._route(msg.stream, True)
        self.sink.message("resent", f"{self.tx}:{msg.stream}:{msg.seq}", src, dst, len(msg.data), segment=segment)

    # -- receiver ----------------------------------------------------------

    def _rx(self, kind: str, stream: int, seq: Any, size: int, segment: int | None = None) -> None:
        src, dst = self._route(stream, False)
        self.sink.message(kind, f"{self.rx}:{stream}:{seq}", src, dst, size, segment=segment)

    def in_order(self, stream: int, seq: int, size: int) -> None:
        """A whole message arrived and goes to the application at once."""
        self._rx("received", stream, seq, size)
        self._rx("delivered", stream, seq, size)

    def loose(self, stream: int, seq: int, size: int) -> None:
        """An unreliable message: delivered on arrival, in no order."""
        self._rx("received", stream, f"u{seq}", size)
        self._rx("delivered", stream, f"u{seq}", size)

    def arrived(self, stream: int, seq: int, size: int, expected: int, pending: dict) -> None:
        """A whole message is here; held (buffered) when ``seq`` is past ``expected``."""
        self._pieces.pop((stream, seq), None)
        self._rx("received", stream, seq, size)
        if seq > expected:
            self._rx("buffered", stream, seq, size)
            self.gap(stream, seq, expected, pending)

    def released(self, stream: int, seq: int, size: int) -> None:
        """A held message goes to the application, its turn come."""
        self._rx("delivered", stream, seq, size)

    def gap(self, stream: int, seq: int, expected: int, pending: dict) -> None:
        """``seq`` arrived ahead of ``expected``: the messages between, not held, are missing."""
        start = max(expected, self._missed.get(stream, -1) + 1)
        if start >= seq:
            return
        self._missed[stream] = seq - 1
        reported = 0
        for missing in range(start, seq):
            if missing not in pending:
                self._rx("segment-missed", stream, missing, 0)
                reported += 1
                if reported >= MAX_MISSED_PER_GAP:
                    return

    def piece(self, stream: int, seq: int, number: int, parts: dict) -> None:
        """Segment ``number`` of message ``seq`` arrived: earlier ones not here are missing."""
        key = (stream, seq)
        high = self._pieces.get(key, -1)
        if number <= high:
            return
        self._pieces[key] = number
        reported = 0
        for missing in range(high + 1, number):
            if missing not in parts:
                self._rx("segment-missed", stream, seq, 0, missing)
                reported += 1
                if reported >= MAX_MISSED_PER_GAP:
                    return
