"""RUN chunks from a hostile but authenticated peer, and a RUN refused half-way (an outside review of the RUN chunk).

Was a finding: a RUN's array was read by ``msgpack.unpackb`` before anything checked its shape, so its
cost was whatever the bytes told msgpack to build (wire.run_payloads now reads it item by item).  The promise: bad input gets a clear error or a counted drop,
never unbounded memory and never CPU out of proportion to the bytes that carried it.
"""

from __future__ import annotations

import tracemalloc

import msgpack
import pytest

from flowcast.transport.reliable import Link
from flowcast.transport.wire import MSG, RUN, ChunkKind, WireError

#: What reading a body may allocate, at most, per byte of it.  An honest RUN stays far below: its worst
#: case, 4096 two-byte payloads (16 KB), builds ~200 KB of bytes objects and list (about 12 per byte).
_PER_BYTE = 32


def _nested(size: int) -> bytes:
    """``size`` bytes: array16 headers nested as deep as msgpack goes, each declaring ``size`` items."""
    head = b"\xdc" + size.to_bytes(2, "big")
    return (head * 1024 + b"\x00" * size)[:size]


def _flat(size: int, item: bytes) -> bytes:
    """One array of ``size - 3`` one-byte items (empty arrays or maps: a Python object each)."""
    n = size - 3
    return b"\xdc" + n.to_bytes(2, "big") + item * n


def _peak(body: bytes) -> int:
    link = Link(70_000, lambda *a: None)
    tracemalloc.start()
    try:
        with pytest.raises(WireError):
            link.handle(body, 0.0)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    "block",
    [
        pytest.param(_nested(1_160), id="nested-1.2KB"),  # a path-MTU road body
        pytest.param(_nested(8_000), id="nested-8KB"),
        pytest.param(_flat(65_000, b"\x90"), id="65k-empty-arrays"),  # a loopback road / lane body
        pytest.param(_flat(65_000, b"\x80"), id="65k-empty-maps"),
    ],
)
def test_a_hostile_run_array_costs_memory_in_proportion_to_its_bytes(block):
    """Promise: bad input is refused without unbounded memory or CPU out of proportion to it.

    wire.run_payloads unpacks the whole array with msgpack's default limits (every container as long as
    the buffer) before it checks that the array is ``count`` byte strings.  msgpack preallocates a list for
    each array header it reads, so 1024 nested array16 headers in an 8 KB RUN allocate ~62 MB and take
    ~45 ms to refuse (a 1.2 KB one: ~3.4 MB); a flat array of 65 000 empty arrays or maps, declared as a
    RUN of 2, builds 65 000 objects (~4 MB, ~6 ms) first.  The same bytes in a MSG chunk cost nothing
    to read, and an honest RUN allocates ~12 bytes per byte at most.
    """
    body = RUN.pack(ChunkKind.RUN, 0, 0, 0, 2, len(block)) + block
    same_as_msg = MSG.pack(ChunkKind.MSG, 0, 0, 0, len(block)) + block
    Link(70_000, lambda *a: None).handle(same_as_msg, 0.0)  # the same bytes as a message: read, nothing built
    peak = _peak(body)
    assert peak <= _PER_BYTE * len(body), f"{peak / 2**20:.1f} MB allocated to refuse a {len(body)}-byte RUN"


def test_an_honest_run_of_the_most_small_messages_stays_under_the_bound():
    """Guard (passes; no test had it): the bound above leaves room for the costliest honest RUN."""
    payloads = [b"%02d" % (n % 100) for n in range(4096)]
    block = msgpack.packb(payloads)
    body = RUN.pack(ChunkKind.RUN, 0, 0, 0, len(payloads), len(block)) + block
    got = []
    link = Link(70_000, lambda stream, flags, data: got.append(data))
    tracemalloc.start()
    try:
        link.handle(body, 0.0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got == payloads
    assert peak <= _PER_BYTE * len(body) + len(payloads) * 8 + (1 << 16)  # got's own list besides


def test_a_run_refused_half_way_is_resent_as_messages_and_each_arrives_once_in_order():
    """Guard (passes; no test had it): nothing lost, nothing twice, across a _CannotHold mid-run.

    Seq 0 is missing, so a RUN of 1..40 is held one message at a time until the link's limit refuses the
    rest (the packet is not acknowledged); seq 0 then comes, and the sender resends the run's messages as
    MSG chunks: those held before the refusal are duplicates, the rest arrive, and the books end at 0.
    """
    got = []
    link = Link(60_000, lambda stream, flags, data: got.append(bytes(data)), receive_window=1_000, max_message=1_000)
    payloads = [b"m%03d" % n + b"." * 96 for n in range(41)]
    block = msgpack.packb(payloads[1:])
    run = RUN.pack(ChunkKind.RUN, 0, 0, 1, 40, len(block)) + block
    with pytest.raises(WireError):  # _CannotHold: refused, counted, not acknowledged
        link.handle(run, 0.0)
    assert link.counts["refused"] == 1 and got == [] and link.buffered > 0
    held = len(link.streams_in[0].pending)
    assert 0 < held < 40
    link.handle(MSG.pack(ChunkKind.MSG, 0, 0, 0, len(payloads[0])) + payloads[0], 0.0)
    for seq in range(1, 41):  # the lost packet's messages, resent one by one
        link.handle(MSG.pack(ChunkKind.MSG, 0, 0, seq, len(payloads[seq])) + payloads[seq], 0.0)
    assert got == payloads
    assert link.counts["duplicates"] == held and link.buffered == 0
