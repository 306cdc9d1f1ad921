"""The receiving part of a link: order, reassembly, what is held, ACKs owed.

``handle`` reads every chunk of an authenticated body: messages are
delivered in stream order (out-of-order ones held, each counted against
the link's limit and the stack's hold budget), segments are joined
into their message, SKIPs move a stream past a failed message, and ACK
chunks go to the sending part.  ``received`` and ``_ack_chunk`` keep and
write the ranges of packets to acknowledge and, per stream, the next
sequence number not yet delivered.  A mixin of
:class:`flowcast.transport.reliable.Link` (see recovery.py for why
not an object of its own).
"""

from __future__ import annotations

import struct
from typing import Any

from flowcast.transport import evicted as _evicted
from flowcast.transport import heldage as _heldage
from flowcast.transport.holding import (
    AGE_COST,
    BYTES_HEADER,
    ENTRY_COST,
    SKIP_COST,
    STREAM_COST,
    SKIPPED,
    VIEW_HELD,
    _CannotHold,
    StreamIn,
    Partial,
    held_cost,
)
from flowcast.transport.reassembly import MAX_AHEAD, MIN_PIECE, Reassembly
from flowcast.transport.wire import (
    ACK_DELAY,
    ACK,
    ACK_STREAM,
    ACK_RANGE,
    EVICT,
    F_UNRELIABLE,
    MAX_ACK_STREAMS,
    MAX_ACK_RANGES,
    MSG,
    PATH,
    RUN,
    SEG,
    SKIP,
    ChunkKind,
    WireError,
    run_payloads,
)

__all__ = ["ACK_DELAY", "MAX_AHEAD", "MIN_PIECE", "RECEIVER_SLOTS", "Receiver"]

_MSG_KIND, _SEG_KIND, _ACK_KIND, _SKIP_KIND, _PING_KIND = (
    ChunkKind.MSG,
    ChunkKind.SEG,
    ChunkKind.ACK,
    ChunkKind.SKIP,
    ChunkKind.PING,
)
_MSG_SIZE = MSG.size
_RUN_KIND = ChunkKind.RUN
_RUN_SIZE = RUN.size
_run_unpack = RUN.unpack_from
_SEG_SIZE = SEG.size
_msg_unpack = MSG.unpack_from
_seg_unpack = SEG.unpack_from
_ACK_SIZE = ACK.size
_ack_unpack = ACK.unpack_from
# An ACK chunk with one range and one stream, the usual one, in one struct.
_ACK_ONE_STRUCT = struct.Struct("!" + ACK.format.lstrip("!") + ACK_RANGE.format.lstrip("!") + ACK_STREAM.format.lstrip("!"))
_ACK_ONE = _ACK_ONE_STRUCT.pack
_ack_one_unpack = _ACK_ONE_STRUCT.unpack_from
_ACK_ONE_SIZE = _ACK_ONE_STRUCT.size
assert _ACK_ONE_SIZE == ACK.size + ACK_RANGE.size + ACK_STREAM.size
_PATH_CHALLENGE, _PATH_RESPONSE = ChunkKind.PATH_CHALLENGE, ChunkKind.PATH_RESPONSE
_EVICTED_KIND = ChunkKind.EVICTED

# A piece at least nine tenths of its datagram is kept as a view of it, a smaller one is copied (handle).

#: The state this part owns; ``Link.__slots__`` is made of each part's.
RECEIVER_SLOTS = (
    "_buffered",
    "_stream_cursor",
    "_stream_order",
    "_hold_limit",
    "age_tick",
    "ages",
    "ages_at",
    "books",
    "ack_due",
    "ack_owed",
    "ack_pending",
    "adopt",
    "advertised",
    "budget",
    "deliver",
    "evicted_owed",
    "streams_in",
    "held",
    "on_path",
    "partials_unreliable",
    "path_answers",
    "receive_window",
    "recv_ranges",
    "sweep_at",
)




class Receiver(Reassembly):
    """Chunks in, messages delivered in order; ``Link`` mixes it in (slots: RECEIVER_SLOTS)."""

    __slots__ = ()

    def _init_receiver(self, deliver: Any, held: Any, adopt: bool, receive_window: int, max_message: int, budget: Any) -> None:
        self.deliver = deliver
        self.held = held or (lambda: 0)
        self.adopt = adopt  # lane: a stream starts wherever the first chunk seen is
        self.receive_window = receive_window
        self.streams_in: dict[int, StreamIn] = {}
        self.partials_unreliable: dict[tuple[int, int], Partial] = {}
        #: (stream, seq) of reliable messages the hold budget dropped: EVICTED notices owed (evicted.py).
        self.evicted_owed: dict[tuple[int, int], None] | None = None
        #: The stack's byte budget, shared by all its links (None: this link's limit only).
        self.budget = budget
        self._buffered = 0  # bytes and entries held for order or reassembly (see holding.held_cost)
        self.sweep_at: float | None = None  # when incomplete messages are next looked at for expiry
        self._hold_limit = receive_window + 2 * max_message
        self.recv_ranges: list[list[int]] = []
        #: ``on_path(kind, token)``: PATH_CHALLENGE/RESPONSE chunks go to the stack.
        self.on_path: Any = None
        self.path_answers: list[int] = []  # PATH_RESPONSE tokens owed
        self.ack_owed = False  # send an ACK now, alone if nothing else goes
        self.ack_pending = 0  # ack-eliciting packets not yet acknowledged
        self.ack_due: float | None = None  # when a delayed ACK must go alone
        self.advertised = receive_window
        self._stream_cursor = 0
        #: Streams in the order first heard: the ACK's rotation when there are too many for one ACK.
        self._stream_order: list[int] = []
        #: Bytes of books -- stream states, age heap entries (heldage.py) -- in the budget, never evicted.
        self.books = 0
        self.ages: list = []
        self.ages_at = 64
        self.age_tick = 0
        if budget is not None:
            budget.join(self)

    def _new_stream(self, stream: int) -> StreamIn:
        """The state of a stream the peer names for the first time, counted in the budget (or _CannotHold).

        Streams are 16-bit and their state lasts as long as the session: a
        peer that named all of them held 13.5 MB outside any budget.  Each
        now costs STREAM_COST of the link's share, like anything else it holds.
        """
        if not self._room(STREAM_COST):
            raise _CannotHold
        state = self.streams_in[stream] = StreamIn(stream)
        self._stream_order.append(stream)
        self.book(STREAM_COST)
        return state

    def book(self, delta: int) -> None:
        """``delta`` more bytes of books (stream states, age heap entries), here and in the stack's budget.

        Books are not ``buffered`` (what may be evicted): they lower this link's
        own limit instead, so the receive path's one comparison counts them for free.
        """
        self.books += delta
        self._hold_limit -= delta
        budget = self.budget
        if budget is not None:
            budget.used += delta

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
        """May this link hold ``size`` more bytes (its own limit, then the stack's budget)?"""
        if self._buffered + size > self._hold_limit:
            return False
        budget = self.budget
        return budget is None or budget.used + size <= budget.soft or budget.admit(self, size)

    def limit_holding(self, limit: int | None) -> None:
        """Hold at most ``limit`` bytes for order or reassembly (None: this link's own limit).

        The road lowers it for a peer the layer above lets send little or
        nothing (transport/admission.py): what that peer sends is then
        refused before it is held.  What is held already stays for the
        budget's sweeps and evictions.
        """
        default = self.receive_window + 2 * self.max_message
        self._hold_limit = default if limit is None else min(default, max(0, limit))

    def received(self, counter: int) -> None:
        """Record that packet ``counter`` was opened and handled (for ACKs)."""
        ranges = self.recv_ranges
        if ranges and ranges[-1][1] + 1 == counter:
            ranges[-1][1] = counter
        else:
            ranges.append([counter, counter])
            if len(ranges) > 256:
                del ranges[:-MAX_ACK_RANGES]

    def _ack_chunk(self) -> bytes:
        self.ack_owed = False
        self.ack_pending = 0
        self.ack_due = None
        ranges = self.recv_ranges
        streams = self.streams_in
        window = self.receive_window - self.held()
        budget = self.budget
        if budget is not None:
            # Never more than half what this link's fair share of the hold budget has left: a
            # sender with more in flight fills the budget with later messages, and the resends of
            # the message the stream waits on are refused until it expires (EVICTED: failed).
            # Half, because what is held costs more than the bytes sent: 1.2x for pieces of
            # 1,232-byte datagrams, 1.5x of 512-byte ones (the datagram and a view of it).
            room = (budget.share(self) - self._buffered) >> 1
            if room < window:
                window = room
        if window < 0:
            window = 0
        self.advertised = window
        if window > 0xFFFFFFFF:
            window = 0xFFFFFFFF
        if len(ranges) == 1 and len(streams) == 1:
            # the common case (in-order traffic on one stream): one pack call
            first, last = ranges[0]
            for stream, state in streams.items():
                return _ACK_ONE(_ACK_KIND, 0, 1, 1, window, first, last, stream, state.expected)
        chosen = ranges[-MAX_ACK_RANGES:]
        if len(ranges) > 8:
            self.recv_ranges = ranges[-8:]  # repeated next time: a lost ACK costs little
        if len(streams) <= MAX_ACK_STREAMS:
            items = [(stream, state.expected) for stream, state in streams.items()]
        else:
            # In turn, MAX_ACK_STREAMS at a time: each ACK costs the same however many streams the
            # peer named (it sorted them all, so a PING cost ~1 ms with 65,536 of them).
            order = self._stream_order
            start = self._stream_cursor % len(order)
            picked = order[start : start + MAX_ACK_STREAMS]
            if len(picked) < MAX_ACK_STREAMS:
                picked += order[: MAX_ACK_STREAMS - len(picked)]
            self._stream_cursor = start + MAX_ACK_STREAMS
            items = [(stream, streams[stream].expected) for stream in picked]
        pieces = [ACK.pack(_ACK_KIND, 0, len(chosen), len(items), window)]
        pack_range = ACK_RANGE.pack
        for first, last in reversed(chosen):
            pieces.append(pack_range(first, last))
        pack_stream = ACK_STREAM.pack
        for stream, expected in items:
            pieces.append(pack_stream(stream, expected))
        return b"".join(pieces)

    def window_opened(self) -> None:
        """The application took delivered bytes: tell the sender if it was starved."""
        if self.acks and self.advertised < self.receive_window // 4 and self.receive_window - self.held() >= self.receive_window // 2:
            self.ack_owed = True

    def handle(self, body: bytes, now: float) -> None:
        """Process every chunk of an authenticated body; WireError if malformed."""
        end = len(body)
        off = 0
        deliver = self.deliver
        streams = self.streams_in
        watch = self.watch
        eliciting = False
        try:
            while off < end:
                kind = body[off]
                if kind == _MSG_KIND:
                    _, flags, stream, seq, length = _msg_unpack(body, off)
                    off += _MSG_SIZE
                    stop = off + length
                    if stop > end:
                        raise WireError("message chunk overruns the body")
                    eliciting = True
                    if flags & F_UNRELIABLE:
                        if watch is not None:
                            watch.loose(stream, seq, length)
                        deliver(stream, flags, body[off:stop])
                    else:
                        state = streams.get(stream)
                        if state is None:
                            state = self._new_stream(stream)
                            if self.adopt:
                                state.expected = seq
                        expected = state.expected
                        if seq == expected:
                            state.expected = seq + 1
                            if watch is not None:
                                watch.in_order(stream, seq, length)
                            deliver(stream, flags, body[off:stop])
                            if state.pending:
                                self._drain(stream, state)
                        else:
                            self._message_in(state, stream, flags, seq, body[off:stop])
                    off = stop
                elif kind == _RUN_KIND:
                    _, flags, stream, seq, count, length = _run_unpack(body, off)
                    off += _RUN_SIZE
                    stop = off + length
                    if stop > end:
                        raise WireError("run chunk overruns the body")
                    payloads = run_payloads(memoryview(body)[off:stop], flags, seq, count)  # all of them, or WireError
                    eliciting = True
                    state = streams.get(stream)
                    if state is None:
                        state = self._new_stream(stream)
                        if self.adopt:
                            state.expected = seq
                    if seq == state.expected and not state.pending and watch is None:
                        # in order, nothing held: each delivered now, as a MSG chunk's would be
                        state.expected = seq + count
                        for payload in payloads:
                            deliver(stream, flags, payload)
                    else:
                        for payload in payloads:
                            self._message_in(state, stream, flags, seq, payload)
                            seq += 1
                    off = stop
                elif kind == _SEG_KIND:
                    _, flags, stream, seq, number, count, length = _seg_unpack(body, off)
                    off += _SEG_SIZE
                    stop = off + length
                    if stop > end or count < 2 or number >= count:
                        raise WireError("bad segment chunk")
                    eliciting = True
                    # A piece that is nearly its whole datagram is kept as a view
                    # (copied once, when joined) and counted as the whole datagram;
                    # a smaller one is copied, so it never pins more than it counts.
                    if length * 10 >= end * 9:  # nine tenths, in ints: no float per piece
                        piece = memoryview(body)[off:stop]
                        held = len(piece.obj) + VIEW_HELD  # type: ignore[arg-type]  # the datagram stays while the view does
                    else:
                        piece = body[off:stop]
                        if type(piece) is memoryview:  # a body that is a view itself
                            held = len(piece.obj) + VIEW_HELD  # type: ignore[arg-type]
                        else:
                            held = length + BYTES_HEADER if length > 1 else 0  # one-byte bytes are shared
                    self._segment_in(flags, stream, seq, number, count, piece, held, now)
                    off = stop
                elif kind == _ACK_KIND:
                    _, flags, nranges, nstreams, window = _ack_unpack(body, off)
                    if nranges == 1 and nstreams == 1:  # the common case: one unpack
                        _, _, _, _, _, first, last, stream, expected = _ack_one_unpack(body, off)
                        off += _ACK_ONE_SIZE
                        self._on_ack(window, [(first, last)] if first <= last <= self.last_counter else (), ((stream, expected),), now)
                        continue
                    off = self._ack_in(body, off + _ACK_SIZE, nranges, nstreams, window, now)
                elif kind == _SKIP_KIND:
                    _, flags, stream, seq = SKIP.unpack_from(body, off)
                    off += SKIP.size
                    eliciting = True
                    self._skip_in(stream, seq)
                elif kind == _PING_KIND:
                    off += 2
                    if off > end:
                        raise WireError("truncated ping chunk")
                    eliciting = True
                elif kind == _EVICTED_KIND:
                    _, flags, stream, seq = EVICT.unpack_from(body, off)
                    off += EVICT.size
                    _evicted.heard(self, stream, seq)
                elif kind == _PATH_CHALLENGE or kind == _PATH_RESPONSE:
                    _, flags, token = PATH.unpack_from(body, off)
                    off += PATH.size
                    eliciting = True
                    if self.on_path is not None:
                        self.on_path(kind, token)
                else:
                    # ALLOW_ACK and CLOSE are the stack's; it strips them first.
                    raise WireError(f"unexpected chunk kind {kind}")
        except _CannotHold:
            self.counts["refused"] += 1
            raise
        except WireError:
            raise
        except (IndexError, ValueError, struct.error) as error:
            raise WireError(f"truncated chunk: {error}") from None
        if eliciting and self.acks:
            # Delayed ACK (as TCP): a second packet, or ACK_DELAY, makes
            # it go; until then it rides on any reply -- an echo costs one
            # datagram each way, not two.
            self.ack_pending += 1
            if self.ack_pending >= 2:
                self.ack_owed = True
            elif self.ack_due is None:
                self.ack_due = now + ACK_DELAY

    def _ack_in(self, body: bytes, off: int, nranges: int, nstreams: int, window: int, now: float) -> int:
        """Read an ACK's ranges and streams (past the one-range, one-stream case) and act on it; the offset after."""
        if nranges > MAX_ACK_RANGES or nstreams > MAX_ACK_STREAMS:
            raise WireError("ack chunk too long")
        ranges = []
        for _ in range(nranges):
            first, last = ACK_RANGE.unpack_from(body, off)
            off += 16
            if last < first or last > self.last_counter:
                continue  # never sent: ignore rather than trust
            ranges.append((first, last))
        stream_items = []
        for _ in range(nstreams):
            stream_items.append(ACK_STREAM.unpack_from(body, off))
            off += 10
        self._on_ack(window, ranges, stream_items, now)
        return off

    def _skip_in(self, stream: int, seq: int) -> None:
        """The sender gave up on ``seq`` of ``stream``: hold a SKIP in its place, and deliver past it when due."""
        streams = self.streams_in
        state = streams.get(stream)
        if state is None:
            state = self._new_stream(stream)
        if seq >= state.expected and seq - state.expected <= MAX_AHEAD:
            old = state.pending.get(seq)
            if old is None and not self._room(SKIP_COST):
                raise _CannotHold
            state.pending[seq] = SKIPPED
            self._charge(SKIP_COST - held_cost(old) if old is not None else SKIP_COST)
            self._drain(stream, state)

    def _message_in(self, state: StreamIn, stream: int, flags: int, seq: int, payload: bytes) -> None:
        """A whole reliable message: delivered if next, else a duplicate or held (or _CannotHold).

        A MSG chunk delivers its next message inline (the common case) and comes here for the rest;
        a RUN chunk comes here for each message when it is not simply next with nothing held.
        """
        expected = state.expected
        length = len(payload)
        watch = self.watch
        if seq == expected:
            state.expected = seq + 1
            if watch is not None:
                watch.in_order(stream, seq, length)
            self.deliver(stream, flags, payload)
            if state.pending:
                self._drain(stream, state)
        elif seq < expected or seq in state.pending:
            self.counts["duplicates"] += 1
        elif seq - expected > MAX_AHEAD or not self._room(length + ENTRY_COST + AGE_COST):
            raise _CannotHold
        else:
            item = state.pending[seq] = (flags, payload)
            self._charge(length + ENTRY_COST)
            _heldage.push(self, _heldage.INF, state, seq, item)
            if watch is not None:
                watch.arrived(stream, seq, length, expected, state.pending)

    def _drain(self, stream: int, state: StreamIn) -> None:
        pending = state.pending
        deliver = self.deliver
        watch = self.watch
        freed = 0
        try:
            while True:
                seq = state.expected
                item = pending.get(seq)
                if item is None or type(item) is Partial:
                    return
                del pending[seq]
                state.expected = seq + 1
                flags, data = item
                if data is None:
                    freed += SKIP_COST
                    continue
                freed += len(data) + ENTRY_COST
                if watch is not None:
                    watch.released(stream, seq, len(data))
                deliver(stream, flags, data)
        finally:
            if freed:  # one change to the books for the whole run released
                self._charge(-freed)
