"""Message transactions over one session: batching, acks, resend, order.

A :class:`Channel` turns queued messages into packet *bodies* (sequences of
frames, wire.py) and bodies back into delivered messages.  It knows nothing
about sockets or crypto: the stack seals each body it builds under the next
packet counter and hands the channel every body it opens.  That split is
what lets a Road (sealed UDP, lossy) and a Lane (plain Unix datagrams,
lossless and ordered) share it.

Design, in the spirit of QUIC and SCTP rather than RAET's one transaction
per exchange:

* **Packets are acknowledged, not messages.**  An ACK lists ranges of packet
  counters received; the sender keeps, per packet in flight, which message
  segments it carried.  A packet acknowledged frees them; a packet declared
  lost (three later packets acknowledged, or older than the retransmission
  timeout) puts back exactly its unacknowledged segments -- selective resend
  at no per-message cost.  Resends go in new packets with new counters, so
  there is never a retransmission ambiguity in RTT samples.
* **Delivery is reported by flow.**  Each ACK also carries, per flow, the
  next sequence number the receiver has not yet *delivered*.  A sender marks
  a message delivered only then: an acknowledged packet whose message still
  waits behind a gap is not "delivered" (nothing is reported delivered that
  was not).
* **Many small messages, one packet.**  The builder packs frames until the
  body is full; the stack seals each body with one AEAD call.
* **Flow control.**  The receiver advertises a window (bytes it can still
  hold); the sender keeps bytes in flight under min(window, cwnd), and cwnd
  halves once per loss episode (AIMD), so a burst cannot bury the receiver
  or a lossy path.
* **Per-message reliability.**  ``timeout`` (deadline), ``retries`` (resends
  of any one segment), ``burst`` (segments of this message in flight) or
  fire-and-forget (``reliable=False``: sent once, delivered on arrival,
  never ordered).  A reliable message that fails is replaced on the wire by
  a SKIP frame so the receiver's flow moves on instead of waiting forever.
"""

from __future__ import annotations

import heapq
import struct
import sys
from collections import deque
from collections.abc import Callable
from typing import Any

from flowcast.transport import budget as _budget
from flowcast.transport import evicted as _evicted
from flowcast.transport.outgoing import DELIVERED, FAILED, QUEUED, SENT, Outgoing, OutgoingStateError
from flowcast.transport.tablesize import GROW_AT, SIZE_AT
from flowcast.transport.wire import (
    ACK,
    ACK_FLOW,
    ACK_RANGE,
    F_UNRELIABLE,
    MAX_ACK_FLOWS,
    MAX_ACK_RANGES,
    MSG,
    PATH,
    PING,
    SEG,
    EVICT,
    SKIP,
    FrameKind,
    WireError,
)

__all__ = ["Outgoing", "Channel", "QUEUED", "DELIVERED", "FAILED", "SENT"]

_ACKED = 255  # in Outgoing.marks: this segment is acknowledged (else: times sent)

_MSG_KIND, _SEG_KIND, _ACK_KIND, _SKIP_KIND, _PING_KIND = (
    FrameKind.MSG,
    FrameKind.SEG,
    FrameKind.ACK,
    FrameKind.SKIP,
    FrameKind.PING,
)
_MSG_SIZE = MSG.size
_SEG_SIZE = SEG.size
_msg_unpack = MSG.unpack_from
_msg_pack = MSG.pack
_seg_unpack = SEG.unpack_from
_PING_FRAME = PING.pack(FrameKind.PING, 0)
_ACK_SIZE = ACK.size
_ack_unpack = ACK.unpack_from
# An ACK frame with one range and one flow, the usual one, in one struct.
_ACK_ONE_STRUCT = struct.Struct("!" + ACK.format.lstrip("!") + ACK_RANGE.format.lstrip("!") + ACK_FLOW.format.lstrip("!"))
_ACK_ONE = _ACK_ONE_STRUCT.pack
_ack_one_unpack = _ACK_ONE_STRUCT.unpack_from
_ACK_ONE_SIZE = _ACK_ONE_STRUCT.size
_ACK_MAX_SIZE = ACK.size + MAX_ACK_RANGES * ACK_RANGE.size + MAX_ACK_FLOWS * ACK_FLOW.size
assert _ACK_ONE_SIZE == ACK.size + ACK_RANGE.size + ACK_FLOW.size
_PATH_CHALLENGE, _PATH_RESPONSE = FrameKind.PATH_CHALLENGE, FrameKind.PATH_RESPONSE
_EVICTED_KIND = FrameKind.EVICTED

REORDER_THRESHOLD = 3  # packets acknowledged after one before it is called lost
MIN_RTO = 0.05
MAX_RTO = 2.0
INITIAL_RTO = 0.25
MAX_AHEAD = 1 << 20  # sequence numbers a receiver buffers beyond the next expected
# What held data costs beyond its bytes (CPython 3.11, 64-bit, measured with
# tracemalloc: tests/transport/test_budget.py keeps them honest): empty frames
# are not free, and the budget must count what is held, not what was sent.
_ENTRY = 145  # a whole message held out of order (tuple, dict slot, key, bytes header)
_SKIP_ENTRY = 80  # a SKIP held out of order
_PARTIAL = 240  # an incomplete message: its object, an empty dict of pieces, its slot and key
# A piece costs its bytes object (one-byte ones are shared), its key (small
# ints are shared), and what it grows the dict of pieces by (sys.getsizeof):
# dict tables grow by doubling, so a constant per piece is off by up to 2x.
_BYTES = sys.getsizeof(b"")  # a bytes object's header
_INT = sys.getsizeof(1 << 20)
_VIEW = sys.getsizeof(memoryview(b""))
_VIEW_HELD = _BYTES + _VIEW  # a view's own object and its datagram's bytes header
_EMPTY_DICT = sys.getsizeof({})
_FIRST_TABLE = sys.getsizeof({1 << 20: None}) - _EMPTY_DICT  # what a dict's first insert allocates
MIN_PIECE = 128  # every piece of a message but its last is this long at least (a segment: max_body - 88)
# A piece at least nine tenths of its datagram is kept as a view of it, a smaller one is copied (handle).
MIN_CWND = 64 * 1024
MAX_INFLIGHT_PACKETS = 1024
ACK_DELAY = 0.002
_INF = float("inf")


class _FlowIn:
    __slots__ = ("expected", "pending")

    def __init__(self) -> None:
        self.expected = 0
        self.pending: dict[int, Any] = {}  # seq -> (flags, bytes) | _Partial | _SKIPPED


class _Partial:
    __slots__ = ("count", "parts", "size", "flags", "born", "last", "waste", "piece", "table", "step", "grow_at")

    def __init__(self, count: int, flags: int, born: float) -> None:
        self.count = count
        self.parts: dict[int, bytes] = {}
        self.size = 0
        self.flags = flags
        self.born = born
        self.last = born  # when the last new piece came (incomplete messages expire from it)
        self.waste = 0  # bytes held beyond the pieces' data: objects, keys, the dict, datagrams kept whole
        self.piece = 0  # the length every piece but the last has (0: none seen yet)
        self.table = _EMPTY_DICT  # sys.getsizeof(parts), as last accounted
        self.step = 0  # index in tablesize.GROW_AT of the next length at which parts grows
        self.grow_at = GROW_AT[0]


_SKIPPED = (0, None)


_NO_QUEUE: Any = ()  # an empty, immutable stand-in for a send queue not made yet


class Channel:
    """Sender and receiver halves of message transactions for one session.

    ``deliver(flow, flags, payload)`` is called for every message in order;
    ``completed(outgoing)`` for every message that reaches a final state.
    ``held()`` says how many delivered bytes the application has not yet
    taken (it shrinks the advertised window).  With ``acks=False`` (a lane)
    the transport is trusted to be lossless and ordered: nothing is
    acknowledged, and a message counts as delivered once it is handed over.
    """

    # One per session: slots, not a ~1.6 KB instance dict per remote.  An
    # attribute added to the class must be named here too.
    __slots__ = (
        "_buffered",
        "_early",
        "_flow_cursor",
        "_hold_limit",
        "_latest_deadline",
        "_small",
        "ack_due",
        "ack_owed",
        "ack_pending",
        "acks",
        "adopt",
        "advertised",
        "backoff",
        "budget",
        "completed",
        "counts",
        "cwnd",
        "deliver",
        "flows_in",
        "fresh",
        "evicted_owed",
        "held",
        "inflight",
        "inflight_bytes",
        "largest_acked",
        "last_counter",
        "last_progress",
        "max_body",
        "max_cwnd",
        "max_message",
        "next_seq",
        "on_path",
        "partials_unreliable",
        "path_answers",
        "peer_window",
        "pending_count",
        "ping_owed",
        "receive_window",
        "recovery_point",
        "recv_ranges",
        "resend",
        "rto",
        "rttvar",
        "segsize",
        "srtt",
        "sweep_at",
        "unfinished",
        "unreliable_seq",
        "watch",
    )

    def __init__(
        self,
        max_body: int,
        deliver: Callable[[int, int, bytes], None],
        completed: Callable[[Outgoing], None] | None = None,
        *,
        held: Callable[[], int] | None = None,
        acks: bool = True,
        adopt: bool = False,
        receive_window: int = 8 << 20,
        max_message: int = (64 << 20) + (1 << 16),
        max_cwnd: int = 16 << 20,
        now: float = 0.0,
        budget: _budget.HoldBudget | None = None,
    ) -> None:
        if max_body < 256:
            raise ValueError("max_body too small")
        self.max_body = max_body
        self.segsize = max_body - _SEG_SIZE - 64  # room for a small ACK beside it
        self._small = max_body - 64 - _MSG_SIZE  # largest message sent whole
        self.deliver = deliver
        self.completed = completed
        self.held = held or (lambda: 0)
        self.acks = acks
        self.adopt = adopt  # lane: a flow starts wherever the first frame seen is
        self.receive_window = receive_window
        self.max_message = max_message
        # sender
        self.next_seq: dict[int, int] = {}
        self.unreliable_seq = 0
        self.unfinished: dict[int, deque[Outgoing]] = {}
        # Made when first needed and let go when empty again (see shrink):
        # an empty deque is ~760 B, and most remotes are idle most of the time.
        self.fresh: deque[Outgoing] = _NO_QUEUE  # type: ignore[assignment]
        self.resend: deque[tuple[Outgoing, int]] = _NO_QUEUE  # type: ignore[assignment]
        self.inflight: dict[int, list] = {}  # counter -> [sent_at, nbytes, [msg, sn, msg, sn, ...]]
        self.inflight_bytes = 0
        self.cwnd = min(1 << 20, max_cwnd)
        self.max_cwnd = max_cwnd
        self.peer_window = 1 << 20
        self.largest_acked = -1
        self.recovery_point = -1
        self.last_counter = -1
        self.srtt: float | None = None
        self.rttvar = 0.0
        self.rto = INITIAL_RTO
        self.backoff = 0
        self.pending_count = 0  # reliable messages not yet final
        self._latest_deadline: dict[int, float] = {}
        self._early: list[tuple[float, int, Outgoing]] = []
        self.ping_owed = False
        self.last_progress = now
        # receiver
        self.flows_in: dict[int, _FlowIn] = {}
        self.partials_unreliable: dict[tuple[int, int], _Partial] = {}
        #: (flow, seq) of reliable messages the hold budget dropped: EVICTED notices owed (evicted.py).
        self.evicted_owed: dict[tuple[int, int], None] | None = None
        #: The stack's byte budget, shared by all its channels (None: this channel's limit only).
        self.budget = budget
        self._buffered = 0  # bytes and entries held for order or reassembly (see _held_cost)
        self.sweep_at: float | None = None  # when incomplete messages are next looked at for expiry
        self._hold_limit = receive_window + 2 * max_message
        self.recv_ranges: list[list[int]] = []
        #: ``on_path(kind, token)``: PATH_CHALLENGE/RESPONSE frames go to the stack.
        self.on_path: Callable[[int, int], None] | None = None
        self.path_answers: list[int] = []  # PATH_RESPONSE tokens owed
        self.ack_owed = False  # send an ACK now, alone if nothing else goes
        self.ack_pending = 0  # ack-eliciting packets not yet acknowledged
        self.ack_due: float | None = None  # when a delayed ACK must go alone
        self.advertised = receive_window
        self._flow_cursor = 0
        self.counts: dict[str, int] = {"resent": 0, "lost_packets": 0, "duplicates": 0, "refused": 0, "failed": 0}
        #: A ``stack.ChannelEvents`` while the stack records message events; None
        #: (the default) costs one local test per frame received, nothing more.
        self.watch: Any = None

    @property
    def buffered(self) -> int:
        """Bytes (and per-entry costs) held for order or reassembly, as the budget counts them."""
        return self._buffered

    @buffered.setter
    def buffered(self, value: int) -> None:
        self._charge(value - self._buffered)

    def _charge(self, delta: int) -> None:
        """Hold ``delta`` more bytes (fewer if negative), here and in the stack's budget.

        The receive path calls this once per piece or drained run, not a
        property and a budget method per step: it runs per datagram.
        """
        before = self._buffered
        after = self._buffered = before + delta
        budget = self.budget
        if budget is not None:
            budget.used += delta
            if after > 0:
                if before <= 0:
                    budget.holders[self] = None
            elif before > 0:
                budget.holders.pop(self, None)

    def _room(self, size: int) -> bool:
        """May this channel hold ``size`` more bytes (its own limit, then the stack's budget)?"""
        if self._buffered + size > self._hold_limit:
            return False
        budget = self.budget
        return budget is None or budget.used + size <= budget.limit or budget.admit(self, size)

    # -- sending -----------------------------------------------------------

    def submit(self, msg: Outgoing, now: float) -> Outgoing:
        if not msg.pending:
            raise OutgoingStateError(f"cannot send {msg!r} again: it is already {msg.state}")
        data = msg.data
        size = len(data)
        if size > self.max_message:
            raise ValueError(f"message of {size} bytes exceeds the {self.max_message}-byte limit")
        flow = msg.flow
        flags = msg.flags
        if flags & F_UNRELIABLE:
            seq = self.unreliable_seq
            self.unreliable_seq = seq + 1
        else:
            next_seq = self.next_seq
            seq = next_seq.get(flow, 0)
            next_seq[flow] = seq + 1
            if self.acks:  # a lane never waits on delivery, so keeps no books
                queue = self.unfinished.get(flow)
                if queue is None:
                    queue = self.unfinished[flow] = deque()
                queue.append(msg)
                self.pending_count += 1
                if msg.timeout is not None and msg.deadline is None:
                    msg.deadline = now + msg.timeout
                # Deadlines that rise along a flow are watched at its head;
                # one earlier than a message before it also goes in a heap.
                deadline = _INF if msg.deadline is None else msg.deadline
                if deadline < self._latest_deadline.get(flow, -_INF):
                    heapq.heappush(self._early, (deadline, id(msg), msg))
                else:
                    self._latest_deadline[flow] = deadline
        msg.seq = seq
        if size <= self._small:
            msg.nseg = 1
            msg.marks = bytearray(1)
            msg.frame = _msg_pack(_MSG_KIND, flags, flow, seq, size) + data
        else:
            segsize = self.segsize
            msg.next_seg = 0
            msg.inflight = 0
            msg.segsize = segsize
            msg.nseg = -(-size // segsize)
            msg.marks = bytearray(msg.nseg)
            msg.frame = memoryview(data)  # type: ignore[assignment]  # segments are cut from it
        fresh = self.fresh
        if fresh is _NO_QUEUE:
            fresh = self.fresh = deque()
        fresh.append(msg)
        return msg

    def _segment(self, msg: Outgoing, sn: int) -> bytes:
        if msg.skip:
            return SKIP.pack(_SKIP_KIND, 0, msg.flow, msg.seq)
        if msg.nseg == 1:
            return msg.frame  # type: ignore[return-value]
        start = sn * msg.segsize
        piece = msg.frame[start : start + msg.segsize]  # type: ignore[index]  # a memoryview: no copy
        return SEG.pack(_SEG_KIND, msg.flags, msg.flow, msg.seq, sn, msg.nseg, len(piece)) + piece

    def can_send(self) -> bool:
        """Whether data frames may go now (acks and pings always may)."""
        if not self.acks:
            return True
        limit = self.cwnd if self.cwnd < self.peer_window else self.peer_window
        # Packets are capped too: a socket buffer holds datagrams, not bytes,
        # and small ones cost a kernel buffer each.
        return self.inflight_bytes < limit and len(self.inflight) < MAX_INFLIGHT_PACKETS

    def build(self, extra: bytes = b"") -> tuple[bytes, list | None] | None:
        """The next packet body and the frames to remember for it, or None.

        ``extra`` (control frames from the stack) goes first.  The second
        item is None when nothing in the body needs acknowledging.
        """
        fresh = self.fresh
        if len(fresh) == 1 and not extra and not self.resend and not self.ping_owed and self.acks and self.evicted_owed is None:
            # The latency path (one small reliable message, perhaps an ACK
            # to carry): the general loop below, unrolled.
            msg = fresh[0]
            if msg.nseg == 1 and msg.pending and not msg.flags & F_UNRELIABLE and not msg.skip:
                frame = msg.frame
                if len(frame) <= self.max_body - _ACK_MAX_SIZE and self.can_send():
                    fresh.popleft()
                    msg.marks[0] = 1
                    msg.inflight = 1
                    if self.ack_owed or self.ack_pending:
                        return self._ack_frame() + frame, [msg, 0]  # type: ignore[operator]
                    return frame, [msg, 0]  # type: ignore[return-value]
        parts: list[bytes] = []
        size = 0
        if extra:
            parts.append(extra)
            size = len(extra)
        if self.ack_owed or self.ack_pending:  # piggyback whatever is owed
            frame = self._ack_frame()
            parts.append(frame)
            size += len(frame)
            if self.evicted_owed is not None:
                frame = _evicted.frames(self, self.max_body - size)
                parts.append(frame)
                size += len(frame)
        frames: list = []
        eliciting = False
        if self.ping_owed:
            self.ping_owed = False
            parts.append(_PING_FRAME)
            size += 2
            eliciting = True
        limit = self.max_body
        acks = self.acks
        if self.can_send():
            resend = self.resend
            while resend:
                msg, sn = resend[0]
                if not msg.pending or msg.marks[sn] == _ACKED:
                    resend.popleft()
                    continue
                frame = self._segment(msg, sn)
                if size + len(frame) > limit:
                    break
                resend.popleft()
                parts.append(frame)
                size += len(frame)
                frames.append(msg)
                frames.append(sn)
                if msg.marks[sn] < 254:
                    msg.marks[sn] += 1
                msg.inflight += 1
                self.counts["resent"] += 1
                if self.watch is not None and not msg.skip:
                    self.watch.resent(msg, sn)
            fresh = self.fresh
            append = parts.append
            fappend = frames.append
            while fresh:
                msg = fresh[0]
                if not msg.pending:
                    fresh.popleft()
                    continue
                if msg.nseg == 1:
                    frame = msg.frame
                    length = len(frame)  # type: ignore[arg-type]
                    if size + length > limit:
                        break
                    fresh.popleft()
                    append(frame)
                    size += length
                    if msg.flags & F_UNRELIABLE:
                        msg.mark_sent()
                        if self.completed is not None:
                            self.completed(msg)
                    elif acks:
                        fappend(msg)
                        fappend(0)
                        msg.marks[0] = 1
                        msg.inflight = 1
                    else:
                        fappend(msg)  # a lane marks it sent once the port takes the datagram
                    continue
                # a segmented message: as many segments as fit and burst allows
                burst = msg.burst
                full = False
                while msg.next_seg < msg.nseg:
                    if burst and msg.inflight >= burst and acks:
                        full = True
                        break
                    sn = msg.next_seg
                    frame = self._segment(msg, sn)
                    if size + len(frame) > limit:
                        full = True
                        break
                    append(frame)
                    size += len(frame)
                    msg.next_seg = sn + 1
                    if acks and not msg.flags & F_UNRELIABLE:
                        fappend(msg)
                        fappend(sn)
                        msg.marks[sn] = 1
                        msg.inflight += 1
                if msg.next_seg >= msg.nseg:
                    fresh.popleft()
                    if msg.flags & F_UNRELIABLE:
                        msg.mark_sent()
                        if self.completed is not None:
                            self.completed(msg)
                    elif not acks:
                        fappend(msg)
                if full:
                    break
        if not parts:
            return None
        body = b"".join(parts) if len(parts) > 1 else parts[0]
        if frames:
            return body, frames
        return body, ([] if eliciting else None)

    def sent(self, counter: int, body_size: int, frames: list | None, now: float) -> None:
        """Remember packet ``counter`` (just sealed and handed to the port)."""
        self.last_counter = counter
        if frames is not None and self.acks:
            self.inflight[counter] = [now, body_size, frames]
            self.inflight_bytes += body_size

    # -- acknowledgements (sender side) ------------------------------------

    def _on_ack(self, window: int, ranges: list[tuple[int, int]], flows: list[tuple[int, int]], now: float) -> None:
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
                frames = rec[2]
                it = iter(frames)
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
        if flows:
            unfinished = self.unfinished
            completed = self.completed
            for flow, expected in flows:
                queue = unfinished.get(flow)
                if not queue:
                    continue
                sent_limit = self.next_seq.get(flow, 0)
                if expected > sent_limit:
                    expected = sent_limit
                while queue and queue[0].seq < expected:
                    msg = queue.popleft()
                    if msg.pending:
                        # delivered: the books as _failed keeps them, inlined (queued here means reliable)
                        msg.deliver()
                        self.pending_count -= 1
                        if completed is not None and not msg.skip:
                            completed(msg)
                if not queue:  # all delivered: an idle flow keeps no queue (760 B) per remote
                    del unfinished[flow]
                    self._latest_deadline.pop(flow, None)
                self.last_progress = now

    def _lost(self, counter: int, rec: list) -> None:
        self.inflight_bytes -= rec[1]
        self.counts["lost_packets"] += 1
        if counter > self.recovery_point:
            self.recovery_point = self.last_counter
            self.cwnd = max(self.cwnd >> 1, MIN_CWND)
        frames = rec[2]
        it = iter(frames)
        resend = self.resend
        if resend is _NO_QUEUE:
            resend = self.resend = deque()
        for msg, sn in zip(it, it):
            if not msg.pending or msg.marks[sn] == _ACKED:
                continue
            msg.inflight -= 1
            if msg.retries is not None and msg.marks[sn] > msg.retries:
                self.fail(msg, "retries exhausted")
            else:
                resend.append((msg, sn))

    def _rtt_sample(self, sample: float) -> None:
        if sample < 0:
            return
        if self.srtt is None:
            self.srtt = sample
            self.rttvar = sample / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - sample)
            self.srtt = 0.875 * self.srtt + 0.125 * sample
        rto = self.srtt + 4 * self.rttvar
        self.rto = MIN_RTO if rto < MIN_RTO else MAX_RTO if rto > MAX_RTO else rto

    def _failed(self, msg: Outgoing, reason: str) -> None:
        """``msg`` (still pending) fails: the books, then its sender hears."""
        msg.fail(reason)
        self.counts["failed"] += 1
        if not msg.flags & F_UNRELIABLE:
            self.pending_count -= 1
            if self.acks is False:
                queue = self.unfinished.get(msg.flow)
                if queue and queue[0] is msg:
                    queue.popleft()
        if self.completed is not None and not msg.skip:
            self.completed(msg)

    def fail(self, msg: Outgoing, reason: str) -> None:
        """Give up on ``msg``; a SKIP takes its place so the flow moves on."""
        if not msg.pending:
            return
        queue = self.unfinished.get(msg.flow)
        if not msg.skip and self.acks and queue is not None:
            skip = Outgoing(b"", msg.flow)
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
            skip.marks = bytearray(1)
        self._failed(msg, reason)

    # -- timers --------------------------------------------------------------

    def _rto_now(self) -> float:
        return min(MAX_RTO * 4, self.rto * (1 << self.backoff))

    def next_deadline(self) -> float | None:
        deadline = self.ack_due if not self.ack_owed else None
        inflight = self.inflight
        if inflight:
            for record in inflight.values():  # the oldest packet in flight
                when = record[0] + self._rto_now()
                break
            if deadline is None or when < deadline:  # a delayed ACK may be due first
                deadline = when
        elif self.pending_count and not self.resend and (not self.fresh or not self.can_send()):
            when = self.last_progress + self._rto_now()
            if deadline is None or when < deadline:
                deadline = when
        for queue in self.unfinished.values():
            if queue:
                head_deadline = queue[0].deadline
                if head_deadline is not None and (deadline is None or head_deadline < deadline):
                    deadline = head_deadline
        early = self._early
        while early and not early[0][2].pending:
            heapq.heappop(early)
        if early and (deadline is None or early[0][0] < deadline):
            deadline = early[0][0]
        sweep_at = self.sweep_at
        if sweep_at is not None and (deadline is None or sweep_at < deadline):
            deadline = sweep_at
        return deadline

    def poll(self, now: float) -> None:
        """Run what is due: delayed ACK, time-threshold loss, probes, message deadlines, expiry."""
        if self.sweep_at is not None and self.sweep_at <= now:
            self.sweep_at = _budget.expire(self, now)
        if self.ack_due is not None and self.ack_due <= now:
            self.ack_owed = True
            self.ack_due = None
        inflight = self.inflight
        if inflight:
            rto = self._rto_now()
            first = next(iter(inflight))
            if inflight[first][0] + rto <= now:
                self.backoff = min(self.backoff + 1, 6)
                while inflight:
                    counter = next(iter(inflight))
                    if inflight[counter][0] + rto > now:
                        break
                    self._lost(counter, inflight.pop(counter))
                if not self.resend and self.pending_count:
                    self.ping_owed = True
        elif self.pending_count and not self.resend and (not self.fresh or not self.can_send()):
            if self.last_progress + self._rto_now() <= now:
                self.ping_owed = True
                self.backoff = min(self.backoff + 1, 6)
                self.last_progress = now
        for queue in list(self.unfinished.values()):
            while queue:
                head = queue[0]
                if head.deadline is None or head.deadline > now or not head.pending:
                    break
                self.fail(head, "timeout")
                if queue and queue[0] is head:
                    break
        early = self._early
        while early and early[0][0] <= now:
            msg = heapq.heappop(early)[2]
            if msg.pending:
                self.fail(msg, "timeout")

    def shrink(self) -> None:
        """Let go of empty send queues (an idle remote's channel keeps none)."""
        if self.fresh is not _NO_QUEUE and not self.fresh:
            self.fresh = _NO_QUEUE  # type: ignore[assignment]
        if self.resend is not _NO_QUEUE and not self.resend:
            self.resend = _NO_QUEUE  # type: ignore[assignment]

    def take_unfinished(self) -> list[Outgoing]:
        """Every reliable message not yet final, in flow order (for a new session)."""
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
        return out

    def fail_all(self, reason: str) -> None:
        for msg in self.take_unfinished():
            msg.fail(reason)
            self.counts["failed"] += 1
            if self.completed is not None:
                self.completed(msg)

    # -- receiving -----------------------------------------------------------

    def received(self, counter: int) -> None:
        """Record that packet ``counter`` was opened and handled (for ACKs)."""
        ranges = self.recv_ranges
        if ranges and ranges[-1][1] + 1 == counter:
            ranges[-1][1] = counter
        else:
            ranges.append([counter, counter])
            if len(ranges) > 256:
                del ranges[:-MAX_ACK_RANGES]

    def _ack_frame(self) -> bytes:
        self.ack_owed = False
        self.ack_pending = 0
        self.ack_due = None
        ranges = self.recv_ranges
        flows = self.flows_in
        window = self.receive_window - self.held()
        if window < 0:
            window = 0
        self.advertised = window
        if window > 0xFFFFFFFF:
            window = 0xFFFFFFFF
        if len(ranges) == 1 and len(flows) == 1:
            # the common case (in-order traffic on one flow): one pack call
            first, last = ranges[0]
            for flow, state in flows.items():
                return _ACK_ONE(_ACK_KIND, 0, 1, 1, window, first, last, flow, state.expected)
        chosen = ranges[-MAX_ACK_RANGES:]
        if len(ranges) > 8:
            self.recv_ranges = ranges[-8:]  # repeated next time: a lost ACK costs little
        if len(flows) <= MAX_ACK_FLOWS:
            items = [(flow, state.expected) for flow, state in flows.items()]
        else:
            keys = sorted(flows)
            start = self._flow_cursor % len(keys)
            picked = (keys[start:] + keys[:start])[:MAX_ACK_FLOWS]
            self._flow_cursor = start + MAX_ACK_FLOWS
            items = [(flow, flows[flow].expected) for flow in picked]
        pieces = [ACK.pack(_ACK_KIND, 0, len(chosen), len(items), window)]
        pack_range = ACK_RANGE.pack
        for first, last in reversed(chosen):
            pieces.append(pack_range(first, last))
        pack_flow = ACK_FLOW.pack
        for flow, expected in items:
            pieces.append(pack_flow(flow, expected))
        return b"".join(pieces)

    def window_opened(self) -> None:
        """The application took delivered bytes: tell the sender if it was starved."""
        if self.acks and self.advertised < self.receive_window // 4 and self.receive_window - self.held() >= self.receive_window // 2:
            self.ack_owed = True

    def handle(self, body: bytes, now: float) -> None:
        """Process every frame of an authenticated body; WireError if malformed."""
        end = len(body)
        off = 0
        deliver = self.deliver
        flows = self.flows_in
        watch = self.watch
        eliciting = False
        try:
            while off < end:
                kind = body[off]
                if kind == _MSG_KIND:
                    _, flags, flow, seq, length = _msg_unpack(body, off)
                    off += _MSG_SIZE
                    stop = off + length
                    if stop > end:
                        raise WireError("message frame overruns the body")
                    eliciting = True
                    if flags & F_UNRELIABLE:
                        if watch is not None:
                            watch.loose(flow, seq, length)
                        deliver(flow, flags, body[off:stop])
                    else:
                        state = flows.get(flow)
                        if state is None:
                            state = flows[flow] = _FlowIn()
                            if self.adopt:
                                state.expected = seq
                        expected = state.expected
                        if seq == expected:
                            state.expected = seq + 1
                            if watch is not None:
                                watch.in_order(flow, seq, length)
                            deliver(flow, flags, body[off:stop])
                            if state.pending:
                                self._drain(flow, state)
                        elif seq < expected or seq in state.pending:
                            self.counts["duplicates"] += 1
                        elif seq - expected > MAX_AHEAD or not self._room(length + _ENTRY):
                            raise _CannotHold
                        else:
                            state.pending[seq] = (flags, body[off:stop])
                            self._charge(length + _ENTRY)
                            if watch is not None:
                                watch.arrived(flow, seq, length, expected, state.pending)
                    off = stop
                elif kind == _SEG_KIND:
                    _, flags, flow, seq, number, count, length = _seg_unpack(body, off)
                    off += _SEG_SIZE
                    stop = off + length
                    if stop > end or count < 2 or number >= count:
                        raise WireError("bad segment frame")
                    eliciting = True
                    # A piece that is nearly its whole datagram is kept as a view
                    # (copied once, when joined) and counted as the whole datagram;
                    # a smaller one is copied, so it never pins more than it counts.
                    if length * 10 >= end * 9:  # nine tenths, in ints: no float per piece
                        piece = memoryview(body)[off:stop]
                        held = len(piece.obj) + _VIEW_HELD  # type: ignore[arg-type]  # the datagram stays while the view does
                    else:
                        piece = body[off:stop]
                        if type(piece) is memoryview:  # a body that is a view itself
                            held = len(piece.obj) + _VIEW_HELD  # type: ignore[arg-type]
                        else:
                            held = length + _BYTES if length > 1 else 0  # one-byte bytes are shared
                    self._segment_in(flags, flow, seq, number, count, piece, held, now)
                    off = stop
                elif kind == _ACK_KIND:
                    _, flags, nranges, nflows, window = _ack_unpack(body, off)
                    if nranges == 1 and nflows == 1:  # the common case: one unpack
                        _, _, _, _, _, first, last, flow, expected = _ack_one_unpack(body, off)
                        off += _ACK_ONE_SIZE
                        self._on_ack(window, [(first, last)] if first <= last <= self.last_counter else (), ((flow, expected),), now)
                        continue
                    off += _ACK_SIZE
                    if nranges > MAX_ACK_RANGES or nflows > MAX_ACK_FLOWS:
                        raise WireError("ack frame too long")
                    ranges = []
                    for _ in range(nranges):
                        first, last = ACK_RANGE.unpack_from(body, off)
                        off += 16
                        if last < first or last > self.last_counter:
                            continue  # never sent: ignore rather than trust
                        ranges.append((first, last))
                    flow_items = []
                    for _ in range(nflows):
                        flow_items.append(ACK_FLOW.unpack_from(body, off))
                        off += 10
                    self._on_ack(window, ranges, flow_items, now)
                elif kind == _SKIP_KIND:
                    _, flags, flow, seq = SKIP.unpack_from(body, off)
                    off += SKIP.size
                    eliciting = True
                    state = flows.get(flow)
                    if state is None:
                        state = flows[flow] = _FlowIn()
                    if seq >= state.expected and seq - state.expected <= MAX_AHEAD:
                        old = state.pending.get(seq)
                        if old is None and not self._room(_SKIP_ENTRY):
                            raise _CannotHold
                        state.pending[seq] = _SKIPPED
                        self._charge(_SKIP_ENTRY - _held_cost(old) if old is not None else _SKIP_ENTRY)
                        self._drain(flow, state)
                elif kind == _PING_KIND:
                    off += 2
                    if off > end:
                        raise WireError("truncated ping frame")
                    eliciting = True
                elif kind == _EVICTED_KIND:
                    _, flags, flow, seq = EVICT.unpack_from(body, off)
                    off += EVICT.size
                    _evicted.heard(self, flow, seq)
                elif kind == _PATH_CHALLENGE or kind == _PATH_RESPONSE:
                    _, flags, token = PATH.unpack_from(body, off)
                    off += PATH.size
                    eliciting = True
                    if self.on_path is not None:
                        self.on_path(kind, token)
                else:
                    # ALLOW_ACK and CLOSE are the stack's; it strips them first.
                    raise WireError(f"unexpected frame kind {kind}")
        except _CannotHold:
            self.counts["refused"] += 1
            raise
        except WireError:
            raise
        except (IndexError, ValueError, struct.error) as error:
            raise WireError(f"truncated frame: {error}") from None
        if eliciting and self.acks:
            # Delayed ACK (as TCP): a second packet, or ACK_DELAY, makes
            # it go; until then it rides on any reply -- an echo costs one
            # datagram each way, not two.
            self.ack_pending += 1
            if self.ack_pending >= 2:
                self.ack_owed = True
            elif self.ack_due is None:
                self.ack_due = now + ACK_DELAY

    def _segment_in(self, flags: int, flow: int, seq: int, number: int, count: int, piece: bytes, held: int, now: float) -> None:
        """Hold ``piece`` (``held`` bytes as kept), or deliver its message if it was the last.

        One method per piece, the accounting inline: it runs per datagram.  A
        message's entry is made here but kept only with its first piece (one
        charge for both), so a refused piece leaves nothing behind.  The
        piece that completes a message needs room as any other but is never
        charged: what the entry counted turns into the whole message's cost
        -- or into nothing, delivered in order -- with one change.
        """
        extra = 0
        if flags & F_UNRELIABLE:
            state = None
            holder: dict = self.partials_unreliable
            key: Any = (flow, seq)
            entry = holder.get(key)
            if entry is None:
                if len(holder) >= 64:
                    oldest = min(holder, key=lambda k: holder[k].born)
                    self._charge(-_held_cost(holder.pop(oldest)))
                entry = _Partial(count, flags, now)
                extra = _PARTIAL
            watch = None
        else:
            state = self.flows_in.get(flow)
            if state is None:
                state = self.flows_in[flow] = _FlowIn()
                if self.adopt:  # a message whose start we missed is skipped whole
                    state.expected = seq if number == 0 else seq + 1
            expected = state.expected
            if seq < expected:
                self.counts["duplicates"] += 1
                return
            holder = state.pending
            key = seq
            entry = holder.get(seq)
            if entry is None:
                if seq - expected > MAX_AHEAD:
                    raise _CannotHold
                entry = _Partial(count, flags, now)
                extra = _PARTIAL
            elif type(entry) is not _Partial:
                self.counts["duplicates"] += 1
                return
            watch = self.watch
            if watch is not None and number not in entry.parts:
                watch.piece(flow, seq, number, entry.parts)
                if seq > expected:
                    watch.gap(flow, seq, expected, holder)
        if entry.count != count:
            raise WireError("segment count changed within a message")
        parts = entry.parts
        if number in parts:
            self.counts["duplicates"] += 1
            return
        size = len(piece)
        if size != entry.piece and number != count - 1:
            # once a message: every piece but the last is one full segment,
            # never under MIN_PIECE -- 2^32-1 one-byte pieces are no message,
            # only a way to make a receiver hold ~80 B of books per byte sent
            if entry.piece:
                raise WireError("segment length changed within a message")
            if size < MIN_PIECE or (count - 1) * size > self.max_message:
                raise WireError("segment length and count cannot make a message")
            entry.piece = size
        if number > 256:
            held += _INT  # its key: small ints are shared
        table = entry.table
        # room for the piece, and for its dict's table to double (it may: the cost is known only after)
        need = extra + held + (table if table > _FIRST_TABLE else _FIRST_TABLE)
        budget = self.budget
        if (
            entry.size + size > self.max_message
            or self._buffered + need > self._hold_limit
            or (budget is not None and budget.used + need > budget.limit and not budget.admit(self, need))
        ):
            raise _CannotHold
        parts[number] = piece
        filled = len(parts)
        if filled < count:
            if filled >= entry.grow_at:  # the dict's table grew (tablesize.py)
                step = entry.step
                table_now = SIZE_AT[step]
                if table_now < 0:  # longer than measured: ask
                    table_now = sys.getsizeof(parts)
                    entry.grow_at = filled + 1
                else:
                    entry.step = step + 1
                    entry.grow_at = GROW_AT[step + 1]
                held += table_now - table
                entry.table = table_now
            entry.size += size
            entry.waste += held - size
            entry.last = now
            # the books, as _charge keeps them
            held += extra
            after = self._buffered = self._buffered + held
            if budget is not None:
                budget.used += held
                if after <= held:
                    budget.holders[self] = None
            if extra:
                holder[key] = entry
                if self.sweep_at is None and budget is not None:
                    self.sweep_at = now + budget.incomplete_after  # a sweep will look at it
            return
        complete = b"".join([parts[i] for i in range(count)])
        counted = 0 if extra else _held_cost(entry)  # every piece but this last one
        if state is None:
            if not extra:
                del holder[key]
                self._charge(-counted)
            if self.watch is not None:
                self.watch.loose(flow, seq, len(complete))
            self.deliver(flow, flags, complete)
            return
        if seq == expected and watch is None:
            # in order: delivered now, never held whole
            if not extra:
                del holder[seq]
                self._charge(-counted)
            state.expected = seq + 1
            self.deliver(flow, flags, complete)
            if holder:
                self._drain(flow, state)
            return
        self._charge(len(complete) + _ENTRY - counted)
        holder[seq] = (flags, complete)
        if watch is not None:
            watch.arrived(flow, seq, len(complete), expected, holder)
        if seq == expected:
            self._drain(flow, state)

    def _drain(self, flow: int, state: _FlowIn) -> None:
        pending = state.pending
        deliver = self.deliver
        watch = self.watch
        freed = 0
        try:
            while True:
                seq = state.expected
                item = pending.get(seq)
                if item is None or type(item) is _Partial:
                    return
                del pending[seq]
                state.expected = seq + 1
                flags, data = item
                if data is None:
                    freed += _SKIP_ENTRY
                    continue
                freed += len(data) + _ENTRY
                if watch is not None:
                    watch.released(flow, seq, len(data))
                deliver(flow, flags, data)
        finally:
            if freed:  # one change to the books for the whole run released
                self._charge(-freed)


def _held_cost(item: Any) -> int:
    """What ``item`` (held in a flow or reassembly) counts against the hold limit."""
    if isinstance(item, _Partial):
        return item.size + item.waste + _PARTIAL
    data = item[1]
    return len(data) + _ENTRY if data is not None else _SKIP_ENTRY


class _CannotHold(WireError):
    """The receiver cannot hold this now: the packet stays unacknowledged."""
