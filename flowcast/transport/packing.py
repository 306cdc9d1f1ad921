"""What goes in a link's next packet body: resends first, then queued messages, an owed ACK beside.

A mixin of :class:`flowcast.transport.sender.Sender` (its state is the
sender's, SENDER_SLOTS), split from sender.py, which had grown past what
one reads at once: that module queues messages and reads ACKs; this one
packs bodies.  ``build`` makes the next body of any kind, and
``next_segments`` the bulk path's run of bodies that are each one segment
of a large message.  A whole message is packed only here, when its body
is built (sender.py says why); reliable whole messages of one stream
numbered in a row go as one RUN chunk (``_wholes_into``).

Like sender.py, this module reads ``msg._state`` where it runs per
message sent, and never writes it (tests/transport/test_outgoing.py).
"""

from __future__ import annotations

from typing import Any

import msgpack

from flowcast.transport import evicted as _evicted
from flowcast.transport.outgoing import QUEUED, Outgoing
from flowcast.transport.wire import (
    ACK,
    ACK_STREAM,
    ACK_RANGE,
    F_UNRELIABLE,
    MAX_ACK_STREAMS,
    MAX_ACK_RANGES,
    MAX_RUN,
    MSG,
    PING,
    RUN,
    SEG,
    SKIP,
    ChunkKind,
)

__all__ = ["ACKED", "ELICITING", "MAX_INFLIGHT_PACKETS", "NO_SEGMENTS", "Packing"]

#: In ``Outgoing.marks``: this segment is acknowledged (else: times sent).
ACKED = 255
MAX_INFLIGHT_PACKETS = 1024
#: Never appended to: a packet's record with whole messages only shares it for its segments.
NO_SEGMENTS: list = []
#: What a packet carried when it asks for an ACK but holds nothing to resend (a PING):
#: ``Sender.sent`` keeps it in flight all the same, for the round-trip time and loss detection.
ELICITING = (NO_SEGMENTS, ())

_MSG_KIND, _SEG_KIND, _SKIP_KIND, _RUN_KIND = ChunkKind.MSG, ChunkKind.SEG, ChunkKind.SKIP, ChunkKind.RUN
_MSG_SIZE = MSG.size
_SEG_SIZE = SEG.size
_RUN_SIZE = RUN.size
_msg_pack = MSG.pack
_seg_pack = SEG.pack
_run_pack = RUN.pack
_packb = msgpack.Packer().pack  # bytes as bin: a run's array of payloads
_PING_CHUNK = PING.pack(ChunkKind.PING, 0)
_ACK_MAX_SIZE = ACK.size + MAX_ACK_RANGES * ACK_RANGE.size + MAX_ACK_STREAMS * ACK_STREAM.size
_ACKED = ACKED
_NO_SEGMENTS = NO_SEGMENTS


class Packing:
    """Bodies out of a Sender's queues; ``Sender`` is one (slots: SENDER_SLOTS)."""

    __slots__ = ()
    fresh: Any
    resend: Any
    acks: bool
    max_body: int

    def _segment(self, msg: Outgoing, sn: int) -> bytes:
        if msg.skip:
            return SKIP.pack(_SKIP_KIND, 0, msg.stream, msg.seq)
        if msg.nseg == 1:
            data = msg.data
            return _msg_pack(_MSG_KIND, msg.flags, msg.stream, msg.seq, len(data)) + data
        start = sn * msg.segsize
        piece = msg.chunk[start : start + msg.segsize]  # type: ignore[index]  # a memoryview: no copy
        return _seg_pack(_SEG_KIND, msg.flags, msg.stream, msg.seq, sn, msg.nseg, len(piece)) + piece

    def can_send(self) -> bool:
        """Whether data chunks may go now (acks and pings always may)."""
        if not self.acks:
            return True
        limit = self.cwnd if self.cwnd < self.peer_window else self.peer_window
        # Packets are capped too: a socket buffer holds datagrams, not bytes,
        # and small ones cost a kernel buffer each.
        return self.inflight_bytes < limit and len(self.inflight) < MAX_INFLIGHT_PACKETS

    def build(self, extra: bytes = b"") -> tuple[bytes, Any] | None:
        """The next packet body and the chunks to remember for it, or None.

        ``extra`` (control chunks from the stack) goes first.  The second
        item is None when nothing in the body needs acknowledging.
        """
        fresh = self.fresh
        if fresh and not extra and not self.resend and not self.ping_owed and self.acks and self.evicted_owed is None:
            # The latency path (one small reliable message, perhaps an ACK
            # to carry): the general loop below, unrolled.
            msg = fresh[0]
            if msg.nseg == 1 and len(fresh) == 1 and msg._state == QUEUED and not msg.flags & F_UNRELIABLE and not msg.skip:
                data = msg.data
                if _MSG_SIZE + len(data) <= self.max_body - _ACK_MAX_SIZE and self.can_send():
                    fresh.popleft()
                    head = _msg_pack(_MSG_KIND, msg.flags, msg.stream, msg.seq, len(data))
                    if self.ack_owed or self.ack_pending:
                        head = self._ack_chunk() + head
                    return head + data, (_NO_SEGMENTS, [msg])
            elif msg.nseg != 1:
                run = self.next_segments(1)
                if run:
                    return run[0]
        parts: list[bytes] = []
        size = self._control_into(parts, extra) if extra or self.ack_owed or self.ack_pending else 0
        eliciting = self.ping_owed
        if eliciting:
            self.ping_owed = False
            parts.append(_PING_CHUNK)
            size += 2
        chunks: list = []  # segments as (msg, sn) pairs; with no ACKs (a lane), every message once
        wholes: list = []  # whole reliable messages (ACKs only)
        acks = self.acks
        if self.can_send():
            if self.resend:
                size = self._resend_into(parts, chunks, wholes, size)
            fresh = self.fresh
            wappend = wholes.append if acks else chunks.append  # a lane marks them sent once the port takes the datagram
            while fresh:
                msg = fresh[0]
                if msg._state != QUEUED:
                    fresh.popleft()
                    continue
                if msg.nseg != 1:
                    size, full = self._segments_into(msg, parts, chunks, size)
                else:
                    size, full = self._wholes_into(parts, wappend, size)
                if full:
                    break
        if not parts:
            return None
        body = b"".join(parts) if len(parts) > 1 else parts[0]
        if not acks:
            return body, (chunks or None)
        if chunks or wholes:
            return body, (chunks or _NO_SEGMENTS, wholes)
        return body, (ELICITING if eliciting else None)


    def _wholes_into(self, parts: list[bytes], taken: Any, size: int) -> tuple[int, bool]:
        """Add the whole messages at the head of the queue that fit; (size, body full).

        Reliable ones of one stream numbered in a row go as one RUN chunk (one header for all,
        the payloads one msgpack array: packed in one C call here and read in one there, with 2-3
        bytes a message where a MSG chunk has 16); a lone one as a MSG chunk.  ``size`` counts
        what each could cost at most, so the body never outgrows max_body.  ``taken(msg)`` hears
        of each reliable one.
        """
        fresh = self.fresh
        limit = self.max_body
        append = parts.append
        item = 3 if self._small <= 0xFFFF else 5  # a bin16 (bin32) header per payload at most
        start = _RUN_SIZE + 3 + item  # an array16 header
        full = False
        while fresh:
            msg = fresh[0]
            if msg._state != QUEUED:
                fresh.popleft()
                continue
            if msg.nseg != 1:
                break
            data = msg.data
            length = len(data)
            if size + start + length > limit:
                full = True
                break
            fresh.popleft()
            flags = msg.flags
            if flags & F_UNRELIABLE:
                append(_msg_pack(_MSG_KIND, flags, msg.stream, msg.seq, length))
                append(data)
                size += _MSG_SIZE + length
                msg.mark_sent()
                if self.completed is not None:
                    self.completed(msg)
                continue
            run = [data]
            first, stream = msg.seq, msg.stream
            size += start + length
            taken(msg)
            # The rest of the run, in a loop of its own: the messages after it, numbered in a row.
            extend = run.append
            after = first + 1
            stop = first + MAX_RUN
            while fresh:
                msg = fresh[0]
                if msg.seq != after or after == stop or msg.stream != stream or msg.flags != flags or msg.nseg != 1 or msg._state != QUEUED:
                    break
                data = msg.data
                grown = size + item + len(data)
                if grown > limit:
                    full = True
                    break
                size = grown
                fresh.popleft()
                extend(data)
                taken(msg)
                after += 1
            _close_run(append, run, flags, stream, first)
            if full:
                break
        return size, full

    def next_segments(self, most: int) -> list[tuple[bytes, tuple]]:
        """The bulk path: up to ``most`` bodies, each one segment of the large message at the head of
        the queue, with what to remember for each (as ``build`` returns them); [] where ``build`` must
        decide (something else to send or owed, a SKIP, an unreliable or stopped message, its last
        segment -- shorter, so the general loop may fit more beside it -- its burst or the window full).

        A segment fills a body (segsize), and an owed ACK goes in a body of its own, so each body is
        made directly; the conditions are checked once for the run and the window by arithmetic, as
        ``can_send`` would find it before each, since the stack calls ``sent`` for every body in turn.
        """
        fresh = self.fresh
        if (
            not fresh or self.resend or self.ping_owed or not self.acks or self.evicted_owed is not None
            or self.ack_owed or self.ack_pending
        ):
            return []
        msg = fresh[0]
        nseg = msg.nseg
        if nseg == 1:
            return []
        sn = msg.next_seg
        if sn + 1 >= nseg or msg._state != QUEUED or msg.skip or msg.flags & F_UNRELIABLE:
            return []
        limit = self.cwnd if self.cwnd < self.peer_window else self.peer_window
        room = limit - self.inflight_bytes
        packets = MAX_INFLIGHT_PACKETS - len(self.inflight)
        burst = msg.burst
        if burst:
            packets = min(packets, burst - msg.inflight)
        stop = min(nseg - 1, sn + most, sn + packets)  # never the last segment
        segment = self._segment
        marks = msg.marks
        out = []
        while sn < stop and room > 0:
            body = segment(msg, sn)
            out.append((body, ([msg, sn], ())))
            marks[sn] = 1
            room -= len(body)
            sn += 1
        msg.inflight += sn - msg.next_seg
        msg.next_seg = sn
        return out

    def _control_into(self, parts: list[bytes], extra: bytes) -> int:
        """Put the stack's control chunks and an owed ACK (with EVICTED notices) first; their size."""
        size = 0
        if extra:
            parts.append(extra)
            size = len(extra)
        if self.ack_owed or self.ack_pending:  # piggyback whatever is owed
            chunk = self._ack_chunk()
            parts.append(chunk)
            size += len(chunk)
            if self.evicted_owed is not None:
                chunk = _evicted.chunks(self, self.max_body - size)
                parts.append(chunk)
                size += len(chunk)
        return size

    def _resend_into(self, parts: list[bytes], chunks: list, wholes: list, size: int) -> int:
        """Add the segments and whole messages declared lost that still fit, oldest first; the body's size after."""
        resend = self.resend
        limit = self.max_body
        while resend:
            msg, sn = resend[0]
            whole = msg.nseg == 1
            if msg._state != QUEUED or (not whole and msg.marks[sn] == _ACKED):
                resend.popleft()
                continue
            chunk = self._segment(msg, sn)
            if size + len(chunk) > limit:
                break
            resend.popleft()
            parts.append(chunk)
            size += len(chunk)
            if whole:
                wholes.append(msg)
            else:
                chunks.append(msg)
                chunks.append(sn)
                if msg.marks[sn] < 254:
                    msg.marks[sn] += 1
                msg.inflight += 1
            self.counts["resent"] += 1
            if self.watch is not None and not msg.skip:
                self.watch.resent(msg, sn)
        return size

    def _segments_into(self, msg: Outgoing, parts: list[bytes], chunks: list, size: int) -> tuple[int, bool]:
        """Add as many of ``msg``'s next segments as fit and its burst allows; (size, body full)."""
        acks = self.acks
        limit = self.max_body
        burst = msg.burst
        full = False
        while msg.next_seg < msg.nseg:
            if burst and msg.inflight >= burst and acks:
                full = True
                break
            sn = msg.next_seg
            chunk = self._segment(msg, sn)
            if size + len(chunk) > limit:
                full = True
                break
            parts.append(chunk)
            size += len(chunk)
            msg.next_seg = sn + 1
            if acks and not msg.flags & F_UNRELIABLE:
                chunks.append(msg)
                chunks.append(sn)
                msg.marks[sn] = 1
                msg.inflight += 1
        if msg.next_seg >= msg.nseg:
            self.fresh.popleft()
            if msg.flags & F_UNRELIABLE:
                msg.mark_sent()
                if self.completed is not None:
                    self.completed(msg)
            elif not acks:
                chunks.append(msg)
        return size, full


def _close_run(append: Any, run: list[bytes], flags: int, stream: int, first: int) -> None:
    """Put a run of whole messages in the body: one of them as a MSG chunk, more as a RUN chunk."""
    if len(run) == 1:
        data = run[0]
        append(_msg_pack(_MSG_KIND, flags, stream, first, len(data)))
        append(data)
        return
    block = _packb(run)
    append(_run_pack(_RUN_KIND, flags, stream, first, len(run), len(block)))
    append(block)
