"""A peer's msgpack is decoded without letting it declare more than it holds (wire.unpack_untrusted).

Five bytes of array32 header declare 60,000 items, and msgpack makes that
list before reading them: nested, a 60 KB payload made ``unpackb`` allocate
~80 MB and spend ~55 ms before failing.  Every decoder of a peer's payload
(a stack's messages, a routed parcel's data, a CAST card) walks it first.
"""

from __future__ import annotations

import random
import msgpack
import pytest

from flowcast.transport.wire import WALK_FROM, unpack_untrusted

from tests.memorykit import traced_peak

from .roadkit import World


def _bomb(size: int) -> bytes:
    header = b"\xdd" + size.to_bytes(4, "big")  # array32 declaring ``size`` items: one more header each
    return (header * (size // len(header)))[:size]


@pytest.mark.parametrize("size", [WALK_FROM, 4_096, 60_000])
def test_nested_headers_declaring_what_is_not_there_cost_next_to_nothing(size):
    peak, outcome = traced_peak(lambda: unpack_untrusted(_bomb(size)))
    assert isinstance(outcome, ValueError)
    assert peak < 4 * size + 64 * 1024  # the walker's copy of the bytes, and little else
    if size == 60_000:  # what the plain decoder does with the same bytes: the reason for all this
        plain, outcome = traced_peak(lambda: msgpack.unpackb(_bomb(size)))
        assert isinstance(outcome, Exception) and plain > 10_000_000


def test_below_the_walk_a_payload_cannot_make_much():
    peak, outcome = traced_peak(lambda: unpack_untrusted(_bomb(WALK_FROM - 1)))
    assert isinstance(outcome, Exception) and peak < 512 * 1024


def _value(rng: random.Random, depth: int = 0):
    roll = rng.random()
    if depth > 3 or roll < 0.4:
        return rng.choice([rng.randint(-(2**40), 2**40), rng.random(), "s" * rng.randint(0, 40), b"b" * rng.randint(0, 300), None, True])
    if roll < 0.7:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 12))]
    return {f"k{i}": _value(rng, depth + 1) for i in range(rng.randint(0, 8))}


def test_it_decodes_what_unpackb_decodes_and_refuses_what_it_refuses():
    rng = random.Random(11)
    sizes = set()
    for _ in range(400):
        packed = msgpack.packb(_value(rng), use_bin_type=True)
        sizes.add(len(packed) >= WALK_FROM)
        assert unpack_untrusted(packed) == msgpack.unpackb(packed)
        assert unpack_untrusted(memoryview(packed), raw=False) == msgpack.unpackb(packed, raw=False)
        for broken in (packed[:-1], packed + b"\x00"):  # cut short; one byte too many
            with pytest.raises(ValueError):
                msgpack.unpackb(broken)
            with pytest.raises(ValueError):
                unpack_untrusted(broken)
    assert sizes == {True, False}  # both sides of the walk were compared


def test_a_peer_sending_one_as_a_message_gets_it_counted_undecodable():
    world = World(seed=51, delay=0.001)
    alpha, beta = world.pair()
    bomb = alpha.send_bytes(_bomb(60_000), "beta", _flags=0)  # raw bytes flagged as msgpack: a hostile peer
    after = alpha.send({"fine": True}, "beta")
    assert world.run_until(lambda: bomb.delivered and after.delivered, 5)
    peak, got = traced_peak(beta.receive_many)
    assert [m.data for m in got] == [{"fine": True}]
    assert beta.counts["undecodable"] == 1
    assert peak < 1_000_000


def test_at_the_walks_edge_it_decodes_what_unpackb_does_from_any_buffer():
    for size in (WALK_FROM - 1, WALK_FROM, WALK_FROM + 1):
        packed = msgpack.packb(b"x" * (size - 2))  # bin8: two bytes of header
        assert len(packed) == size
        for data in (packed, memoryview(packed), bytearray(packed), memoryview(b"..." + packed)[3:]):
            assert unpack_untrusted(data) == msgpack.unpackb(packed)
