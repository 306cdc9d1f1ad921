"""Pieces into messages: the reassembly part of a link's receiving.

``_segment_in`` takes any SEG chunk ``Receiver.handle`` reads: it holds
the piece (counted against the link's limit and the stack's hold budget,
see holding.py) or joins and delivers its message.  ``piece_in`` is the
same for the one case bulk traffic is made of -- a body that is one SEG
chunk, a middle piece of a message already begun, in its room -- taken
without ``handle``'s dispatch, in one call that also books the packet for
its ACK: a road's receive path calls it per datagram before anything else
(roadreceive.py), and it says no to everything else, which then goes the
whole way.  A mixin of :class:`~flowcast.transport.receiver.Receiver`.
"""

from __future__ import annotations

import sys
from typing import Any

from flowcast.transport import heldage as _heldage
from flowcast.transport.holding import (
    AGE_COST,
    ENTRY_COST,
    FIRST_TABLE,
    INT_KEY,
    PARTIAL_COST,
    VIEW_HELD,
    _CannotHold,
    Partial,
    held_cost,
)
from flowcast.transport.tablesize import GROW_AT, SIZE_AT
from flowcast.transport.wire import ACK_DELAY, F_UNRELIABLE, SEG, ChunkKind, WireError

__all__ = ["MAX_AHEAD", "MIN_PIECE", "Reassembly"]

MAX_AHEAD = 1 << 20  # sequence numbers a receiver buffers beyond the next expected
MIN_PIECE = 128  # every piece of a message but its last is this long at least (a segment: max_body - 88)

_SEG_KIND = ChunkKind.SEG
_SEG_SIZE = SEG.size
_seg_unpack = SEG.unpack_from
# piece_in's bodies: long enough that handle would keep the piece as a view (nine tenths of the body)
_MIN_QUICK = 10 * _SEG_SIZE


class Reassembly:
    """``_segment_in`` and ``piece_in`` of a Receiver (its state is the link's)."""

    __slots__ = ()

    def piece_in(self, body: bytes, counter: int, now: float) -> bool:
        """Take ``body`` (packet ``counter``) if it is one middle piece of a message begun; False: not taken.

        What it does is what ``handle``, ``_segment_in`` and ``received`` would do for that
        body, books included (tests/transport/test_piece_in.py holds it to them); a body it
        does not take is left untouched for them.  It takes only a reliable piece, not the
        first of its message nor the one that completes it, of the length the message's
        pieces have, with room for it under the link's limit and the budget as they stand,
        on a link no watch looks at, that does not grow the dict of pieces: every other
        case, and anything malformed, is theirs.
        """
        end = len(body)
        if end < _MIN_QUICK or body[0] != _SEG_KIND or type(body) is not bytes or self.watch is not None:
            return False
        _, flags, stream, seq, number, count, length = _seg_unpack(body, 0)
        if length + _SEG_SIZE != end or flags & F_UNRELIABLE or number >= count:
            return False
        state = self.streams_in.get(stream)
        if state is None:
            return False
        entry = state.pending.get(seq)
        if type(entry) is not Partial or entry.count != count or length != entry.piece or seq < state.expected:
            return False
        parts = entry.parts
        filled = len(parts) + 1
        if filled >= count or filled >= entry.grow_at or number in parts:
            return False
        held = end + VIEW_HELD if number <= 256 else end + VIEW_HELD + INT_KEY  # the datagram, kept whole by the view
        table = entry.table
        need = held + (table if table > FIRST_TABLE else FIRST_TABLE)
        budget = self.budget
        if (
            entry.size + length > self.max_message
            or self._buffered + need > self._hold_limit
            or (budget is not None and budget.used + need > budget.soft)
        ):
            return False
        parts[number] = memoryview(body)[_SEG_SIZE:]
        entry.size += length
        entry.waste += held - length
        entry.last = now
        after = self._buffered = self._buffered + held
        if budget is not None:
            budget.used += held
            if after <= held:
                budget.holders[self] = None
        ranges = self.recv_ranges
        if ranges and ranges[-1][1] + 1 == counter:
            ranges[-1][1] = counter
        else:
            self.received(counter)
        if self.acks:  # handle's delayed ACK
            pending = self.ack_pending = self.ack_pending + 1
            if pending >= 2:
                self.ack_owed = True
            elif self.ack_due is None:
                self.ack_due = now + ACK_DELAY
        return True

    def _segment_in(self, flags: int, stream: int, seq: int, number: int, count: int, piece: bytes, held: int, now: float) -> None:
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
            key: Any = (stream, seq)
            entry = holder.get(key)
            if entry is None:
                if len(holder) >= 64:
                    oldest = min(holder, key=lambda k: holder[k].born)
                    self._charge(-held_cost(holder.pop(oldest)))
                entry = Partial(count, flags, now)
                extra = PARTIAL_COST
            watch = None
        else:
            state = self.streams_in.get(stream)
            if state is None:
                state = self._new_stream(stream)  # type: ignore[attr-defined]  # Receiver's
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
                entry = Partial(count, flags, now)
                extra = PARTIAL_COST
            elif type(entry) is not Partial:
                self.counts["duplicates"] += 1
                return
            watch = self.watch
            if watch is not None and number not in entry.parts:
                watch.piece(stream, seq, number, entry.parts)
                if seq > expected:
                    watch.gap(stream, seq, expected, holder)
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
            held += INT_KEY  # its key: small ints are shared
        table = entry.table
        # room for the piece, and for its dict's table to double (it may: the cost is known only after)
        need = extra + held + (table if table > FIRST_TABLE else FIRST_TABLE)
        if extra:
            need += AGE_COST  # its entry in the age heap
        budget = self.budget
        if (
            entry.size + size > self.max_message
            or self._buffered + need > self._hold_limit
            or (budget is not None and budget.used + need > budget.soft and not budget.admit(self, need))
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
                _heldage.push(self, now, state, key, entry)  # type: ignore[arg-type]
                if self.sweep_at is None and budget is not None:
                    self.sweep_at = now + budget.incomplete_after  # a sweep will look at it
            return
        complete = b"".join([parts[i] for i in range(count)])
        counted = 0 if extra else held_cost(entry)  # every piece but this last one
        if state is None:
            if not extra:
                del holder[key]
                self._charge(-counted)
            if self.watch is not None:
                self.watch.loose(stream, seq, len(complete))
            self.deliver(stream, flags, complete)
            return
        if seq == expected and watch is None:
            # in order: delivered now, never held whole
            if not extra:
                del holder[seq]
                self._charge(-counted)
            state.expected = seq + 1
            self.deliver(stream, flags, complete)
            if holder:
                self._drain(stream, state)
            return
        self._charge(len(complete) + ENTRY_COST - counted)
        item = holder[seq] = (flags, complete)
        _heldage.push(self, _heldage.INF, state, seq, item)  # type: ignore[arg-type]
        if watch is not None:
            watch.arrived(stream, seq, len(complete), expected, holder)
        if seq == expected:
            self._drain(stream, state)
