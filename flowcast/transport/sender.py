"""The sending part of a link: queueing, segmentation, packets, acknowledgements.

``submit`` numbers a message in its stream and queues it; ``build``
(packing.py's part) packs queued chunks, resends first, into the next
packet body (an owed ACK rides along); ``sent`` remembers which segments each packet carried, and
an ACK (``_on_ack``) frees them and reports messages delivered once the
receiver says its stream has moved past them.  A message that fails is
replaced on the wire by a SKIP, so the receiver's stream moves on.  A
mixin of :class:`flowcast.transport.reliable.Link` (see recovery.py
for why not an object of its own).

A whole message (one MSG chunk) is kept light, since a road sends
hundreds of thousands a second: no chunk is packed for it until a body
is built (header and payload go into the join), it has no per-segment
``marks``, and a packet's record lists whole messages apart from
segments, so an ACK drops them with the record instead of marking each
one -- their delivery is reported by stream (``deliver_through``), and a
lost packet puts back those still queued.  Before, the packed chunk and
the marks were two allocations a message kept alive while in flight
(~0.45 us of a 100-byte message's ~2.4) and the ACK touched each one.

A message's state is outgoing.py's: this module changes it only through
its transitions (``fail``, ``mark_sent``, ``deliver_through``).  It does
read ``msg._state`` where it runs once per message sent: in CPython 3.11
the ``pending`` property there cost the send path ~7% (a property is a
Python call, a slot read is not).  tests/transport/test_outgoing.py holds
both rules: no other module writes the state, none but this one and
packing.py read it.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Any

from flowcast.transport.outgoing import QUEUED, Outgoing, OutgoingStateError, settle
from flowcast.transport.outgoing import numbered as _numbered
from flowcast.transport.packing import ACKED, ELICITING, MAX_INFLIGHT_PACKETS, NO_SEGMENTS, Packing
from flowcast.transport.wire import F_UNRELIABLE, MSG, SEG

__all__ = ["ACKED", "ELICITING", "MAX_INFLIGHT_PACKETS", "NO_QUEUE", "REORDER_THRESHOLD", "SENDER_SLOTS", "Sender"]

#: An empty, immutable stand-in for a send queue not made yet.
NO_QUEUE: Any = ()
REORDER_THRESHOLD = 3  # packets acknowledged after one before it is called lost

_MSG_SIZE = MSG.size
_SEG_SIZE = SEG.size
_INF = float("inf")
_ACKED = ACKED
_NO_QUEUE = NO_QUEUE
_NO_SEGMENTS = NO_SEGMENTS

#: The state this part owns; ``Link.__slots__`` is made of each part's.
SENDER_SLOTS = (
    "_early",
    "_latest_deadline",
    "_small",
    "fresh",
    "inflight",
    "inflight_bytes",
    "last_counter",
    "next_seq",
    "peer_window",
    "pending_bytes",
    "pending_count",
    "ping_owed",
    "resend",
    "segsize",
    "unfinished",
    "unreliable_seq",
)


class Sender(Packing):
    """Messages out, acknowledgements in; ``Link`` mixes it in (slots: SENDER_SLOTS); its bodies are
    packed by packing.py's part."""

    __slots__ = ()

    def _init_sender(self, max_body: int) -> None:
        self.segsize = max_body - _SEG_SIZE  # a whole body: an owed ACK goes alone (see build)
        self._small = max_body - 64 - _MSG_SIZE  # largest message sent whole
        self.next_seq: dict[int, int] = {}
        self.unreliable_seq = 0
        self.unfinished: dict[int, deque[Outgoing]] = {}
        # Made when first needed and let go when empty again (see shrink):
        # an empty deque is ~760 B, and most remotes are idle most of the time.
        self.fresh: deque[Outgoing] = _NO_QUEUE  # type: ignore[assignment]
        self.resend: deque[tuple[Outgoing, int]] = _NO_QUEUE  # type: ignore[assignment]
        # counter -> [sent_at, nbytes, [msg, sn, ...] of segments, [msg, ...] of whole messages]
        self.inflight: dict[int, list] = {}
        self.inflight_bytes = 0
        self.peer_window = 1 << 20
        self.last_counter = -1
        self.pending_count = 0  # reliable messages not yet final
        self.pending_bytes = 0  # and their bytes: what the road's send queue budget bounds (roadsend.py)
        self._latest_deadline: dict[int, float] = {}
        self._early: list[tuple[float, int, int, Outgoing]] = []  # (deadline, stream, seq, msg): no two alike, so no address decides
        self.ping_owed = False

    def submit_small(self, data: bytes, stream: int, flags: int, timeout: float | None, to: Any, now: float) -> Outgoing | None:
        """A new reliable message that goes whole, made and queued in one step; None if ``data`` is too big.

        What ``Outgoing(...)`` and :meth:`submit` do for it, without what
        cannot apply to a message made here (it is new, reliable and one
        chunk): every small message a road sends takes this path, and each
        call and check left out was ~5% of a 100-byte message's cost.
        """
        if data.__class__ is not bytes:  # a buffer to copy, or no payload at all: the general path's
            return None
        size = len(data)
        if size > self._small or size > self.max_message:  # segmented, or refused: the general path's
            return None
        seq = self.next_seq.get(stream, 0)
        deadline = _INF if timeout is None else now + timeout  # first what can raise, before any books
        msg = _numbered(data, stream, flags, timeout, to, seq, None if timeout is None else deadline)
        self.next_seq[stream] = seq + 1
        queue = self.unfinished.get(stream)
        if queue is None:
            queue = self.unfinished[stream] = deque()
        queue.append(msg)
        self.pending_count += 1
        self.pending_bytes += size
        latest = self._latest_deadline
        if deadline < latest.get(stream, -_INF):
            heapq.heappush(self._early, (deadline, stream, seq, msg))
        else:
            latest[stream] = deadline
        fresh = self.fresh
        if fresh is _NO_QUEUE:
            fresh = self.fresh = deque()
        fresh.append(msg)
        return msg

    def submit(self, msg: Outgoing, now: float) -> Outgoing:
        if msg._state != QUEUED:
            raise OutgoingStateError(f"cannot send {msg!r} again: it is already {msg.state}")
        data = msg.data
        if data.__class__ is not bytes:
            # A copy, as a whole message is packed only when it goes: what the caller changes later
            # must not change what is sent.  Anything that is no buffer raises here, before any books.
            data = msg.data = bytes(memoryview(data))
        size = len(data)
        if size > self.max_message:
            raise ValueError(f"message of {size} bytes exceeds the {self.max_message}-byte limit")
        stream = msg.stream
        flags = msg.flags
        if flags & F_UNRELIABLE:
            seq = self.unreliable_seq
            self.unreliable_seq = seq + 1
        else:
            next_seq = self.next_seq
            seq = next_seq.get(stream, 0)
            next_seq[stream] = seq + 1
            if self.acks:  # a lane never waits on delivery, so keeps no books
                queue = self.unfinished.get(stream)
                if queue is None:
                    queue = self.unfinished[stream] = deque()
                queue.append(msg)
                self.pending_count += 1
                self.pending_bytes += size
                if msg.timeout is not None and msg.deadline is None:
                    msg.deadline = now + msg.timeout
                # Deadlines that rise along a stream are watched at its head;
                # one earlier than a message before it also goes in a heap.
                deadline = _INF if msg.deadline is None else msg.deadline
                if deadline < self._latest_deadline.get(stream, -_INF):
                    heapq.heappush(self._early, (deadline, stream, seq, msg))
                else:
                    self._latest_deadline[stream] = deadline
        msg.seq = seq
        if size > self._small:
            segsize = self.segsize
            msg.next_seg = 0
            msg.inflight = 0
            msg.segsize = segsize
            msg.nseg = -(-size // segsize)
            msg.marks = bytearray(msg.nseg)
            msg.chunk = memoryview(data)  # type: ignore[assignment]  # segments are cut from it
        else:
            msg.nseg = 1  # a message sent again on a new session may have been cut for the old one
            msg.lost = 0
        fresh = self.fresh
        if fresh is _NO_QUEUE:
            fresh = self.fresh = deque()
        fresh.append(msg)
        return msg

    def sent(self, counter: int, body_size: int, chunks: Any, now: float) -> None:
        """Remember packet ``counter`` (just sealed and handed to the port).

        ``chunks`` is what ``build`` returned beside the body (None: nothing to
        acknowledge; ELICITING for a body built elsewhere that asks for an ACK).
        """
        self.last_counter = counter
        if chunks is not None and self.acks:
            self.inflight[counter] = [now, body_size, chunks[0], chunks[1]]
            self.inflight_bytes += body_size


    def sent_run(self, first: int, run: list[tuple[bytes, Any]], now: float) -> None:
        """``sent`` for each (body, chunks) of ``run``, sealed under counters from ``first`` in a row."""
        counter = first
        if self.acks:
            inflight = self.inflight
            total = 0
            for body, chunks in run:
                if chunks is not None:
                    size = len(body)
                    inflight[counter] = [now, size, chunks[0], chunks[1]]
                    total += size
                counter += 1
            self.inflight_bytes += total
        else:
            counter += len(run)
        self.last_counter = counter - 1

    # -- acknowledgements ------------------------------------------------------

    def _on_ack(self, window: int, ranges: list[tuple[int, int]], streams: list[tuple[int, int]], now: float) -> None:
        self.peer_window = window
        inflight = self.inflight
        newest = -1
        newest_rec = None
        acked: list = []
        for first, last in ranges:
            if not inflight:
                break
            if len(inflight) == 1:  # one packet in flight (request/reply): one look
                for counter in inflight:
                    break
                if first <= counter <= last:
                    rec = inflight.pop(counter)
                    acked.append(rec)
                    if counter > newest:
                        newest, newest_rec = counter, rec
            elif last - first <= 2 * len(inflight) + 8:
                for counter in range(first, last + 1):
                    rec = inflight.pop(counter, None)
                    if rec is not None:
                        acked.append(rec)
                        if counter > newest:
                            newest, newest_rec = counter, rec
            else:
                # a wide range (in-order traffic acknowledges everything so
                # far): walk what is in flight instead, oldest first
                for counter in tuple(inflight):
                    if counter > last:
                        break
                    if counter >= first:
                        rec = inflight.pop(counter)
                        acked.append(rec)
                        if counter > newest:
                            newest, newest_rec = counter, rec
        if newest_rec is not None:
            # the packets' segments are acknowledged, and the window grows (inlined: the per-ACK path)
            max_cwnd = self.max_cwnd
            for rec in acked:
                nbytes = rec[1]
                self.inflight_bytes -= nbytes
                chunks = rec[2]
                if chunks:  # segments only: whole messages are done with when their stream says so
                    it = iter(chunks)
                    for msg, sn in zip(it, it):
                        marks = msg.marks
                        if marks[sn] != _ACKED:
                            marks[sn] = _ACKED
                            msg.inflight -= 1
                cwnd = self.cwnd
                if cwnd < max_cwnd:
                    self.cwnd = cwnd + nbytes if cwnd < (max_cwnd >> 1) else cwnd + (nbytes * self.max_body) // cwnd
            self.backoff = 0
            self.last_progress = now
            if newest > self.largest_acked:
                self.largest_acked = newest
                self._rtt_sample(now - newest_rec[0])
            if inflight:
                # packet-threshold loss: older packets overtaken by REORDER_THRESHOLD
                limit = self.largest_acked - REORDER_THRESHOLD
                while inflight:
                    counter = next(iter(inflight))
                    if counter > limit:
                        break
                    self._lost(counter, inflight.pop(counter))
        if streams:
            unfinished = self.unfinished
            completed = self.completed
            for stream, expected in streams:
                queue = unfinished.get(stream)
                if not queue:
                    continue
                sent_limit = self.next_seq.get(stream, 0)
                if expected > sent_limit:
                    expected = sent_limit
                if queue[0].seq < expected:  # queued here means reliable: each one pending counted
                    # Two statements: ``completed`` runs listeners that may send on
                    # this link (pending_count += 1); ``-=`` would write back a stale value.
                    settled, size = settle(queue, expected, completed)
                    self.pending_count -= settled
                    self.pending_bytes -= size
                if not queue:  # all delivered: an idle stream keeps no queue (760 B) per remote
                    del unfinished[stream]
                    self._latest_deadline.pop(stream, None)
                self.last_progress = now

    def _lost(self, counter: int, rec: list) -> None:
        """Packet ``counter`` is lost: its unacknowledged segments and its whole messages
        still queued go back to be resent."""
        self.inflight_bytes -= rec[1]
        self.counts["lost_packets"] += 1
        self._congested(counter)
        resend = self.resend
        if resend is _NO_QUEUE:
            resend = self.resend = deque()
        for msg in rec[3]:
            if msg._state != QUEUED:
                continue
            lost = msg.lost = getattr(msg, "lost", 0) + 1  # unset until the first loss (outgoing.py)
            if msg.retries is not None and lost > msg.retries:
                self.fail(msg, "retries exhausted")
            else:
                resend.append((msg, 0))
        it = iter(rec[2])
        for msg, sn in zip(it, it):
            if msg._state != QUEUED or msg.marks[sn] == _ACKED:
                continue
            msg.inflight -= 1
            if msg.retries is not None and msg.marks[sn] > msg.retries:
                self.fail(msg, "retries exhausted")
            else:
                resend.append((msg, sn))

    def _failed(self, msg: Outgoing, reason: str) -> None:
        """``msg`` (still pending) fails: the books, then its sender hears."""
        msg.fail(reason)
        self.counts["failed"] += 1
        if not msg.flags & F_UNRELIABLE:
            self.pending_count -= 1
            self.pending_bytes -= len(msg.data)
            if self.acks is False:
                queue = self.unfinished.get(msg.stream)
                if queue and queue[0] is msg:
                    queue.popleft()
        if self.completed is not None and not msg.skip:
            self.completed(msg)

    def fail(self, msg: Outgoing, reason: str) -> None:
        """Give up on ``msg``; a SKIP takes its place so the stream moves on."""
        if not msg.pending:
            return
        queue = self.unfinished.get(msg.stream)
        if not msg.skip and self.acks and queue is not None:
            skip = Outgoing(b"", msg.stream)
            skip.skip = True
            skip.seq = msg.seq
            for position, item in enumerate(queue):
                if item is msg:
                    queue[position] = skip
                    break
            self.pending_count += 1  # the skip is pending until delivered past
            if self.resend is _NO_QUEUE:
                self.resend = deque()
            self.resend.appendleft((skip, 0))
        self._failed(msg, reason)

    def shrink(self) -> None:
        """Let go of empty send queues (an idle remote's link keeps none)."""
        if self.fresh is not _NO_QUEUE and not self.fresh:
            self.fresh = _NO_QUEUE  # type: ignore[assignment]
        if self.resend is not _NO_QUEUE and not self.resend:
            self.resend = _NO_QUEUE  # type: ignore[assignment]

    def take_unfinished(self) -> list[Outgoing]:
        """Every reliable message not yet final, in stream order (for a new session)."""
        out = []
        for queue in self.unfinished.values():
            out.extend(m for m in queue if m.pending and not m.skip)
        self.unfinished.clear()
        self._early.clear()
        self._latest_deadline.clear()
        self.fresh = _NO_QUEUE  # type: ignore[assignment]
        self.resend = _NO_QUEUE  # type: ignore[assignment]
        self.inflight.clear()
        self.inflight_bytes = 0
        self.pending_count = 0
        self.pending_bytes = 0
        return out

    def fail_all(self, reason: str) -> None:
        for msg in self.take_unfinished():
            msg.fail(reason)
            self.counts["failed"] += 1
            if self.completed is not None:
                self.completed(msg)
