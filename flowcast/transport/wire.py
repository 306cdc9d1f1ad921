"""Binary packet header and chunk codec (see docs/protocol.md).

Every datagram starts with one fixed 16-byte header.  RAET's header fields
are split by who needs them: what a receiver must read *before* it can
authenticate a datagram (packet kind, session id, packet counter, flags)
lives in the clear header; the per-transaction fields (transaction kind,
transaction id, segment number and count) live in *chunks* inside the sealed
body, because one datagram batches many transactions.  The header is also
the AEAD nonce, which is how it is authenticated (crypto.py).

Decoders raise only :class:`WireError`; the stacks count and drop on it.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

import msgpack

from flowcast.errors import Error

__all__ = [
    "WALK_FROM",
    "unpack_untrusted",
    "walk_untrusted",
    "ACK_DELAY",
    "WireError",
    "MAGIC",
    "HEADER",
    "HEADER_SIZE",
    "Header",
    "PacketKind",
    "ChunkKind",
    "MSG",
    "RUN",
    "MAX_RUN",
    "SEG",
    "ACK",
    "ACK_RANGE",
    "ACK_STREAM",
    "SKIP",
    "ALLOW_ACK",
    "PING",
    "CLOSE",
    "PATH",
    "F_UNRELIABLE",
    "F_JSON",
    "F_RAW",
    "run_payloads",
    "array_header",
    "pack_header",
    "unpack_header",
    "decode_chunks",
    "Chunk",
]


class WireError(ValueError, Error):
    """A datagram or chunk that does not parse; always counted and dropped."""


MAGIC = 0xF1  # 'F' for flowcast, protocol version 1 in the low nibble

HEADER = struct.Struct("!BBHIQ")  # magic, packet kind, flags, session id, counter
HEADER_SIZE = HEADER.size  # 16


class PacketKind:
    """Outer packet kinds (RAET's packet kind + transaction kind of handshakes)."""

    JOIN = 1  # signed presentation of long-term keys
    JOIN_ACCEPT = 2  # signed reply: accepted
    JOIN_PEND = 3  # signed reply: waiting for an operator
    JOIN_REFUSE = 4  # signed reply: refused, with a reason
    HELLO = 5  # allow step 1
    COOKIE = 6  # allow step 2
    INITIATE = 7  # allow step 3
    SEALED = 8  # session traffic: AEAD-sealed chunks
    LANE = 9  # lane traffic: plain chunks between yards of one host
    JOIN_COOKIE = 10  # a JOIN's answer under load: prove you receive at this address (joingate.py)
    COOKIED_JOIN = 11  # the same JOIN again, carrying that cookie

    ALL = frozenset(range(1, 12))


class Header(NamedTuple):
    kind: int
    flags: int
    session: int
    counter: int


def pack_header(kind: int, flags: int, session: int, counter: int) -> bytes:
    return HEADER.pack(MAGIC, kind, flags, session, counter)


def unpack_header(data: bytes | memoryview) -> Header:
    if len(data) < HEADER_SIZE:
        raise WireError(f"datagram of {len(data)} bytes is shorter than a header")
    magic, kind, flags, session, counter = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise WireError(f"bad magic 0x{magic:02x}")
    if kind not in PacketKind.ALL:
        raise WireError(f"unknown packet kind {kind}")
    return Header(kind, flags, session, counter)


# -- chunks (inside a sealed or lane body) ---------------------------------


class ChunkKind:
    MSG = 1  # a whole message
    SEG = 2  # one segment of a segmented message
    ACK = 3  # received packet counters, receive window, delivered per stream
    SKIP = 4  # a message abandoned by its sender: deliver nothing, move on
    ALLOW_ACK = 5  # responder's session id, repeated until confirmed
    PING = 6  # alive: asks for an ACK
    CLOSE = 7  # the session ends
    PATH_CHALLENGE = 8  # is the sender of this session really at this address?
    PATH_RESPONSE = 9  # yes: the challenge's token, from the address asked about
    EVICTED = 10  # the receiver dropped acknowledged pieces of this message (hold budget): fail it
    RUN = 11  # whole reliable messages of one stream numbered in a row: a msgpack array of their payloads


# chunk flags
F_UNRELIABLE = 0x01  # fire-and-forget: no stream order, never resent
F_JSON = 0x02  # payload is JSON rather than msgpack
F_RAW = 0x04  # payload is bytes the application sent as bytes

MSG = struct.Struct("!BBHQI")  # kind, flags, stream, seq, length
SEG = struct.Struct("!BBHQIII")  # kind, flags, stream, seq, segment no, count, length
RUN = struct.Struct("!BBHQHI")  # kind, flags, stream, first seq, count, length of the array that follows
#: The most messages one RUN chunk carries (its count is u16; a sender stops a run here).
MAX_RUN = 4096
_SEQ_END = 1 << 64
ACK = struct.Struct("!BBHHI")  # kind, flags, ranges, streams, receive window (bytes)
ACK_RANGE = struct.Struct("!QQ")  # first, last (inclusive)
ACK_STREAM = struct.Struct("!HQ")  # stream, next undelivered seq
SKIP = struct.Struct("!BBHQ")  # kind, flags, stream, seq
EVICT = struct.Struct("!BBHQ")  # kind, flags, stream, seq
ALLOW_ACK = struct.Struct("!BBI")  # kind, flags, responder session id
PING = struct.Struct("!BB")  # kind, flags
CLOSE = struct.Struct("!BB")  # kind, flags
PATH = struct.Struct("!BBQ")  # kind, flags, token

MAX_ACK_RANGES = 64
ACK_DELAY = 0.002  # an ACK owed for one ack-eliciting packet waits this long for a second, or a reply
MAX_ACK_STREAMS = 64


class Chunk(NamedTuple):
    """A decoded chunk; the generic form used by tests, docs and the fuzzer.

    The stacks decode chunks inline on the hot path; this function is the
    reference decoder with the same checks, and
    tests/transport/test_wire_differential.py holds the two to it.
    """

    kind: int
    flags: int
    fields: tuple
    payload: bytes


#: Untrusted msgpack from this length on is walked before it is decoded (unpack_untrusted).
WALK_FROM = 256


def unpack_untrusted(data: bytes | memoryview, **options: Any) -> Any:
    """``msgpack.unpackb(data, **options)`` for bytes a peer chose: only what the bytes hold is made.

    msgpack makes the list or dict an array or map header declares (up to the data's length)
    before it reads the items, so a payload of nested headers declaring what it does not hold
    -- five bytes each -- made ``unpackb`` allocate over a thousand times its size and spend
    about a millisecond per kilobyte before failing (60 KB: 82 MB, 55 ms).  Walking first
    (``Unpacker.skip``: the same parser, no objects made) finds such a lie in microseconds and
    costs a legitimate payload a sixth of its decoding.  Below WALK_FROM bytes the walk would
    cost more than the decoding it guards: there a lie makes at most ~175 KB for ~20 us.
    What the bytes do hold is made: Python objects of up to ~72 bytes per byte (an array of
    empty maps), which the stack's ``max_message`` bounds.
    Raises ValueError as ``unpackb`` does (its subclasses: ExtraData, StackError, FormatError).
    """
    if len(data) >= WALK_FROM:
        walk_untrusted(data)
    return msgpack.unpackb(data, **options)


def walk_untrusted(data: bytes | memoryview) -> None:
    """ValueError unless the msgpack object ``data`` starts with holds what its headers declare.

    Builds nothing (see unpack_untrusted): what a reader that decodes item by item -- a
    streaming Unpacker, which makes each declared list before its items as unpackb does --
    calls first.
    """
    walker = msgpack.Unpacker(max_buffer_size=max(len(data), 1))
    walker.feed(data)
    try:
        walker.skip()
    except msgpack.OutOfData:  # the streaming reader's word for it; unpackb says ValueError
        raise ValueError("msgpack data declares more than it holds") from None


def array_header(buf: bytes | memoryview, offset: int) -> tuple[int, int]:
    """(items declared, where the first starts) of the msgpack array at ``buf[offset]``; ValueError if
    there is no whole array header there.  Read without decoding anything: what a RUN chunk or a
    batch parcel claims is checked before its items are.
    """
    size = len(buf)
    first = buf[offset] if offset < size else -1
    if first & 0xF0 == 0x90:  # fixarray
        return first & 0x0F, offset + 1
    if first == 0xDC and offset + 3 <= size:  # array16
        return int.from_bytes(buf[offset + 1 : offset + 3], "big"), offset + 3
    if first == 0xDD and offset + 5 <= size:  # array32
        return int.from_bytes(buf[offset + 1 : offset + 5], "big"), offset + 5
    raise ValueError("no msgpack array header")


def run_payloads(block: bytes | memoryview, flags: int, seq: int, count: int) -> list[bytes]:
    """The payloads of a RUN chunk's array, or WireError: exactly ``count`` (2..MAX_RUN) byte strings
    of reliable messages numbered within u64, nothing else (one bad item refuses the chunk before any
    is delivered).

    The array's header is read here and must say ``count``; its items are read one by one by an
    unpacker that builds no container with anything in it (no list, map, str or ext), and the first
    item that is not a byte string ends the reading.  Unpacking the whole array at once would build
    whatever the bytes declare first -- arrays nested 1,024 deep, each as long as the block, cost
    ~60 MB for an 8 KB chunk -- and check its shape only after.
    """
    if count < 2 or count > MAX_RUN or flags & F_UNRELIABLE or seq + count > _SEQ_END:
        raise WireError(f"run of {count} messages from {seq}, flags 0x{flags:02x}")
    size = len(block)
    if size < 1 + 2 * count:  # a header, then a bin8 header at least for each payload
        raise WireError("run array shorter than its count")
    if block[0] == 0xDD:  # array32 never: a run is 4,096 at most
        raise WireError("run is not one msgpack array")
    try:
        declared, start = array_header(block, 0)
    except ValueError:
        raise WireError("run is not one msgpack array") from None
    if declared != count:
        raise WireError(f"run array of {declared} for a count of {count}")
    items = msgpack.Unpacker(
        max_buffer_size=size, max_bin_len=size, max_str_len=0, max_array_len=0, max_map_len=0, max_ext_len=0
    )
    payloads: list[bytes] = []
    append = payloads.append
    try:
        items.feed(block[start:])
        for item in items:
            if item.__class__ is not bytes or len(payloads) == count:
                raise WireError("run array is not its count of byte strings")
            append(item)
        # Iterating stops quietly at a cut item: nothing may be left (read_bytes raises on a part of one).
        if len(payloads) != count or items.read_bytes(1):
            raise WireError("run array is not its count of byte strings")
    except WireError:
        raise
    except Exception as error:  # noqa: BLE001 - msgpack raises several kinds on hostile bytes
        raise WireError(f"run array does not decode: {type(error).__name__}") from None
    return payloads


def decode_chunks(body: bytes | memoryview) -> list[Chunk]:
    """Decode a whole body into chunks, or raise WireError."""
    chunks: list[Chunk] = []
    end = len(body)
    off = 0
    try:
        while off < end:
            kind = body[off]
            if kind == ChunkKind.MSG:
                _, flags, stream, seq, length = MSG.unpack_from(body, off)
                off += MSG.size
                if off + length > end:
                    raise WireError("message chunk overruns the body")
                chunks.append(Chunk(kind, flags, (stream, seq), bytes(body[off : off + length])))
                off += length
            elif kind == ChunkKind.RUN:
                _, flags, stream, seq, count, length = RUN.unpack_from(body, off)
                off += RUN.size
                if off + length > end:
                    raise WireError("run chunk overruns the body")
                payloads = run_payloads(body[off : off + length], flags, seq, count)
                chunks.append(Chunk(kind, flags, (stream, seq, payloads), b""))
                off += length
            elif kind == ChunkKind.SEG:
                _, flags, stream, seq, number, count, length = SEG.unpack_from(body, off)
                off += SEG.size
                if off + length > end:
                    raise WireError("segment chunk overruns the body")
                if count < 2 or number >= count:
                    raise WireError(f"segment {number} of {count}")
                chunks.append(Chunk(kind, flags, (stream, seq, number, count), bytes(body[off : off + length])))
                off += length
            elif kind == ChunkKind.ACK:
                _, flags, nranges, nstreams, window = ACK.unpack_from(body, off)
                off += ACK.size
                if nranges > MAX_ACK_RANGES or nstreams > MAX_ACK_STREAMS:
                    raise WireError("ack chunk too long")
                ranges = []
                for _ in range(nranges):
                    first, last = ACK_RANGE.unpack_from(body, off)
                    off += ACK_RANGE.size
                    if first <= last:  # a reversed range acknowledges nothing (docs/protocol.md §6)
                        ranges.append((first, last))
                streams = []
                for _ in range(nstreams):
                    streams.append(ACK_STREAM.unpack_from(body, off))
                    off += ACK_STREAM.size
                chunks.append(Chunk(kind, flags, (window, tuple(ranges), tuple(streams)), b""))
            elif kind == ChunkKind.SKIP or kind == ChunkKind.EVICTED:
                _, flags, stream, seq = SKIP.unpack_from(body, off)
                off += SKIP.size
                chunks.append(Chunk(kind, flags, (stream, seq), b""))
            elif kind == ChunkKind.ALLOW_ACK and off == 0:  # first chunk only: the stack strips it
                _, flags, session = ALLOW_ACK.unpack_from(body, off)
                off += ALLOW_ACK.size
                chunks.append(Chunk(kind, flags, (session,), b""))
            elif kind in (ChunkKind.PATH_CHALLENGE, ChunkKind.PATH_RESPONSE):
                _, flags, token = PATH.unpack_from(body, off)
                off += PATH.size
                chunks.append(Chunk(kind, flags, (token,), b""))
            elif kind == ChunkKind.PING:  # CLOSE is reserved: no version-1 stack sends or takes it
                _, flags = PING.unpack_from(body, off)
                off += PING.size
                chunks.append(Chunk(kind, flags, (), b""))
            else:
                raise WireError(f"unknown chunk kind {kind}")
    except struct.error as error:
        raise WireError(f"truncated chunk: {error}") from None
    if off > end:
        raise WireError("chunk overruns the body")
    return chunks
