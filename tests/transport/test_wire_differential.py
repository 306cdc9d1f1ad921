"""The reference chunk decoder and the receive hot path read bodies alike.

``wire.decode_chunks`` is the plain decoder (docs, fuzzer, tools);
``Link.handle`` decodes inline for speed.  Two decoders of one format
drift apart unless something compares them: this test feeds both the same
sealed-plaintext bodies -- well formed, at the limits, and hostile
(reversed, overlapping and empty ACK ranges, counts at and past 64,
truncated or garbage bytes) -- and checks they accept and reject the same
bodies and read the same chunks from the accepted ones.

To see what the hot path decoded, its receiver forgets each stream between
chunks (every chunk meets a fresh stream state), so ordering and duplicate
rules fall away and each chunk shows up once in what it calls: deliver or
the held table for a MSG, the reassembly entry for a SEG, the sender's ACK
handler, the SKIP drain, the PATH and EVICTED handlers.  What the road does
before the link (a leading ALLOW_ACK is the stack's) is done here too.
"""

from __future__ import annotations

from unittest import mock

import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowcast.transport import evicted, receiver, reliable
from flowcast.transport.sender import ELICITING
from flowcast.transport.wire import (
    ACK,
    ACK_STREAM,
    ACK_RANGE,
    ALLOW_ACK,
    EVICT,
    MAX_ACK_STREAMS,
    MAX_ACK_RANGES,
    MAX_RUN,
    MSG,
    PATH,
    PING,
    RUN,
    SEG,
    SKIP,
    F_UNRELIABLE,
    ChunkKind,
    WireError,
    decode_chunks,
)

_ELICITING = {ChunkKind.MSG, ChunkKind.RUN, ChunkKind.SEG, ChunkKind.SKIP, ChunkKind.PING, ChunkKind.PATH_CHALLENGE, ChunkKind.PATH_RESPONSE}


class _Forgetful(dict):
    """A stream table that keeps nothing: every chunk meets a fresh stream."""

    def __setitem__(self, key, value) -> None:
        pass


class _Recorder:
    """What the hot path decoded, one entry per chunk, in order."""

    def __init__(self) -> None:
        self.seen: list[tuple] = []
        self._open: tuple | None = None  # a MSG's (stream, seq) waiting for its deliver call

    # the link's watch (stack.LinkEvents' receive half)
    def loose(self, stream, seq, length):
        self._open = (stream, seq)

    def in_order(self, stream, seq, length):
        self._open = (stream, seq)

    def arrived(self, stream, seq, length, expected, pending):
        flags, payload = pending[seq]
        self.seen.append(("MSG", flags, stream, seq, bytes(payload)))

    def deliver(self, stream, flags, payload):
        assert self._open is not None and self._open[0] == stream
        self.seen.append(("MSG", flags, stream, self._open[1], bytes(payload)))
        self._open = None


class _Watched(reliable.Link):
    """A Link whose receive sinks record what ``handle`` decoded."""

    def __init__(self, rec: _Recorder) -> None:
        super().__init__(4096, rec.deliver, receive_window=1 << 40)
        self.rec = rec
        self.watch = rec
        self.streams_in = _Forgetful()
        self.last_counter = 2**64 - 1  # every counter was "sent": only the decoding filters ranges
        self.on_path = lambda kind, token: rec.seen.append(("PATH", kind, token))

    def _on_ack(self, window, ranges, streams, now):
        self.rec.seen.append(("ACK", window, tuple(tuple(r) for r in ranges), tuple(tuple(f) for f in streams)))

    def _segment_in(self, flags, stream, seq, number, count, piece, held, now):
        self.rec.seen.append(("SEG", flags, stream, seq, number, count, bytes(piece)))

    def _drain(self, stream, state):  # only SKIPs drain here: streams are fresh, segments recorded above
        (seq,) = state.pending
        self.rec.seen.append(("SKIP", stream, seq))


def _hot(body: bytes) -> tuple[bool, list[tuple], bool]:
    """(accepted, chunks decoded, ack-eliciting) as a road session reads ``body``."""
    rec = _Recorder()
    link = _Watched(rec)
    offset = 0
    if body and body[0] == ChunkKind.ALLOW_ACK and len(body) >= ALLOW_ACK.size:  # road.py strips it
        rec.seen.append(("ALLOW_ACK", ALLOW_ACK.unpack_from(body)[2]))
        offset = ALLOW_ACK.size
    with mock.patch.object(receiver, "MAX_AHEAD", 2**65), mock.patch.object(
        evicted, "heard", lambda ch, stream, seq: rec.seen.append(("EVICTED", stream, seq))
    ):
        try:
            link.handle(body[offset:], 0.0)
        except WireError:
            return False, rec.seen, False
    return True, rec.seen, link.ack_pending > 0 or offset > 0


def _reference(body: bytes) -> tuple[bool, list[tuple], bool]:
    try:
        chunks = decode_chunks(body)
    except WireError:
        return False, [], False
    seen: list[tuple] = []
    for f in chunks:
        if f.kind == ChunkKind.MSG:
            seen.append(("MSG", f.flags, *f.fields, f.payload))
        elif f.kind == ChunkKind.RUN:  # the link reads a run as its messages, one by one
            stream, seq, payloads = f.fields
            seen.extend(("MSG", f.flags, stream, seq + i, payload) for i, payload in enumerate(payloads))
        elif f.kind == ChunkKind.SEG:
            seen.append(("SEG", f.flags, *f.fields, f.payload))
        elif f.kind == ChunkKind.ACK:
            window, ranges, streams = f.fields
            seen.append(("ACK", window, ranges, streams))
        elif f.kind == ChunkKind.SKIP:
            seen.append(("SKIP", *f.fields))
        elif f.kind == ChunkKind.EVICTED:
            seen.append(("EVICTED", *f.fields))
        elif f.kind in (ChunkKind.PATH_CHALLENGE, ChunkKind.PATH_RESPONSE):
            seen.append(("PATH", f.kind, *f.fields))
        elif f.kind == ChunkKind.ALLOW_ACK:
            seen.append(("ALLOW_ACK", *f.fields))
        elif f.kind != ChunkKind.PING:
            raise AssertionError(f"reference decoded a chunk of kind {f.kind} the link has no sink for")
    eliciting = any(f.kind in _ELICITING or f.kind == ChunkKind.ALLOW_ACK for f in chunks)
    return True, seen, eliciting


# -- bodies -------------------------------------------------------------------------


def _edgy(bits: int) -> st.SearchStrategy[int]:
    top = (1 << bits) - 1
    return st.one_of(st.integers(0, 8), st.sampled_from([top, top - 1, 1 << (bits - 1)]), st.integers(0, top))


_u8, _u16, _u32, _u64 = _edgy(8), _edgy(16), _edgy(32), _edgy(64)
_payload = st.binary(max_size=40)
_counter = st.one_of(st.integers(0, 40), _u64)
_range = st.tuples(_counter, _counter)  # as often reversed as not; overlapping when small


@st.composite
def _ack(draw) -> bytes:
    ranges = draw(st.lists(_range, max_size=MAX_ACK_RANGES + 1))
    streams = draw(st.lists(st.tuples(_u16, _u64), max_size=3))
    # the counts usually say the truth, sometimes not (at, past or short of the limit)
    nranges = draw(st.one_of(st.just(len(ranges)), st.sampled_from([0, MAX_ACK_RANGES, MAX_ACK_RANGES + 1, 0xFFFF])))
    nstreams = draw(st.one_of(st.just(len(streams)), st.sampled_from([0, MAX_ACK_STREAMS, MAX_ACK_STREAMS + 1])))
    head = ACK.pack(ChunkKind.ACK, draw(_u8), nranges, nstreams, draw(_u32))
    return head + b"".join(ACK_RANGE.pack(*r) for r in ranges) + b"".join(ACK_STREAM.pack(*f) for f in streams)


@st.composite
def _msg(draw) -> bytes:
    data = draw(_payload)
    length = draw(st.one_of(st.just(len(data)), _u32))
    return MSG.pack(ChunkKind.MSG, draw(st.sampled_from([0, F_UNRELIABLE, 2, 4, 0xFF])), draw(_u16), draw(_u64), length) + data


@st.composite
def _seg(draw) -> bytes:
    data = draw(_payload)
    length = draw(st.one_of(st.just(len(data)), _u32))
    flags, stream, seq, number, count = draw(st.sampled_from([0, F_UNRELIABLE])), draw(_u16), draw(_u64), draw(_u32), draw(_u32)
    return SEG.pack(ChunkKind.SEG, flags, stream, seq, number, count, length) + data


@st.composite
def _run(draw) -> bytes:
    """A RUN chunk: usually its count of byte strings, sometimes too few, other types, or garbage."""
    payloads = draw(st.lists(_payload, min_size=0, max_size=5))
    block = draw(
        st.one_of(
            st.just(msgpack.packb(payloads)),
            st.just(msgpack.packb([*payloads, "text"])),
            st.just(msgpack.packb([*payloads, 7])),
            st.binary(max_size=12),
        )
    )
    count = draw(st.one_of(st.just(len(payloads)), st.sampled_from([0, 1, 2, MAX_RUN, MAX_RUN + 1, 0xFFFF])))
    length = draw(st.one_of(st.just(len(block)), _u32))
    flags, stream, seq = draw(st.sampled_from([0, F_UNRELIABLE, 2])), draw(_u16), draw(_u64)
    return RUN.pack(ChunkKind.RUN, flags, stream, seq, count, length) + block


_chunk = st.one_of(
    _ack(),
    _msg(),
    _run(),
    _seg(),
    st.builds(lambda f, fl, s: SKIP.pack(ChunkKind.SKIP, f, fl, s), _u8, _u16, _u64),
    st.builds(lambda f, fl, s: EVICT.pack(ChunkKind.EVICTED, f, fl, s), _u8, _u16, _u64),
    st.builds(lambda k, f, t: PATH.pack(k, f, t), st.sampled_from([ChunkKind.PATH_CHALLENGE, ChunkKind.PATH_RESPONSE]), _u8, _u64),
    st.builds(lambda f: PING.pack(ChunkKind.PING, f), _u8),
    st.builds(lambda f, s: ALLOW_ACK.pack(ChunkKind.ALLOW_ACK, f, s), _u8, _u32),
    st.builds(lambda k, f: bytes([k, f]), st.sampled_from([0, ChunkKind.CLOSE, 12, 0xFF]), _u8),
)


@st.composite
def _body(draw) -> bytes:
    body = b"".join(draw(st.lists(_chunk, max_size=6)))
    cut = draw(st.one_of(st.none(), st.integers(0, len(body))))  # truncated anywhere
    if cut is not None:
        body = body[:cut]
    return body + draw(st.one_of(st.just(b""), st.binary(max_size=8)))  # trailing garbage


def _agree(body: bytes) -> None:
    ref = _reference(body)
    hot = _hot(body)
    assert hot[0] == ref[0], f"accept: hot path {hot[0]}, reference {ref[0]} for {body.hex()}"
    if ref[0]:
        assert hot[1] == ref[1]
        assert hot[2] == ref[2], "ack-eliciting"


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(_body())
def test_reference_decoder_and_hot_path_agree(body):
    _agree(body)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.binary(max_size=120))
def test_agree_on_garbage(body):
    _agree(body)


def test_reversed_ack_range_acknowledges_nothing_and_the_rest_counts():
    """A reversed range is the peer's mistake, not a reason to drop its data."""
    body = (
        ACK.pack(ChunkKind.ACK, 0, 3, 1, 9)
        + ACK_RANGE.pack(5, 1)
        + ACK_RANGE.pack(7, 9)
        + ACK_RANGE.pack(2**64 - 1, 0)
        + ACK_STREAM.pack(3, 4)
        + MSG.pack(ChunkKind.MSG, 0, 0, 0, 2)
        + b"hi"
    )
    expected = [("ACK", 9, ((7, 9),), ((3, 4),)), ("MSG", 0, 0, 0, b"hi")]
    assert _reference(body) == (True, expected, True)
    assert _hot(body) == (True, expected, True)
    one = ACK.pack(ChunkKind.ACK, 0, 1, 1, 9) + ACK_RANGE.pack(5, 1) + ACK_STREAM.pack(3, 4)  # the one-range fast path
    assert _reference(one) == _hot(one) == (True, [("ACK", 9, (), ((3, 4),))], False)


def test_a_reversed_range_never_frees_a_packet_in_flight():
    """The sender side: packets 1..5 in flight, an ACK (5, 1) leaves them all in flight."""
    ch = reliable.Link(4096, lambda *a: None)
    for counter in range(6):
        ch.sent(counter, 100, ELICITING, 0.0)
    for body in (
        ACK.pack(ChunkKind.ACK, 0, 1, 0, 1 << 20) + ACK_RANGE.pack(5, 1),
        ACK.pack(ChunkKind.ACK, 0, 1, 1, 1 << 20) + ACK_RANGE.pack(5, 1) + ACK_STREAM.pack(0, 0),
    ):
        ch.handle(body, 0.01)
        assert sorted(ch.inflight) == list(range(6))
        assert ch.largest_acked == -1


def test_truncated_ping_is_rejected_by_both():
    body = MSG.pack(ChunkKind.MSG, F_UNRELIABLE, 0, 0, 0) + bytes([ChunkKind.PING])
    assert _reference(body)[0] is False
    assert _hot(body)[0] is False


def test_limits_on_range_and_stream_counts():
    at = ACK.pack(ChunkKind.ACK, 0, MAX_ACK_RANGES, MAX_ACK_STREAMS, 0) + ACK_RANGE.pack(0, 0) * MAX_ACK_RANGES + ACK_STREAM.pack(0, 0) * MAX_ACK_STREAMS
    past = ACK.pack(ChunkKind.ACK, 0, MAX_ACK_RANGES + 1, 0, 0) + ACK_RANGE.pack(0, 0) * (MAX_ACK_RANGES + 1)
    assert _reference(at)[0] and _hot(at)[0]
    assert not _reference(past)[0] and not _hot(past)[0]
    _agree(at)
    _agree(past)


def test_struct_sizes_the_hot_path_hard_codes():
    assert ACK_RANGE.size == 16 and ACK_STREAM.size == 10 and PING.size == 2
