"""A routed parcel is another estate's msgpack: read without letting it declare more than it holds.

The header tests, the sized batch's and the router's were an outside review's (each failed then):
msgpack makes what an array or map header declares before reading it (wire.unpack_untrusted).
"""

from __future__ import annotations

import msgpack

from flowcast.routing.batch import open_batch
from flowcast.routing.parcel import ParcelError, encode, open_data, open_ext, open_header, route_bytes
from flowcast.routing.route import Route

from tests.memorykit import traced_peak

from .kit import ALLOW_ALPHA, World


def _parcel(data: bytes) -> bytes:
    src, dst = Route.parse("out@worker.alpha/main"), Route.parse("in@worker.beta/main")
    return encode(msgpack.Packer(use_bin_type=True).pack, route_bytes(src) + route_bytes(dst), "", 1.0, data)


def test_data_of_nested_headers_declaring_what_is_not_there_is_refused_at_little_cost():
    bomb = (b"\xdd" + (60_000).to_bytes(4, "big")) * 12_000  # 60 KB; msgpack.unpackb made ~80 MB of it
    parcel = _parcel(bomb)
    offset = open_header(parcel)[4]
    peak, outcome = traced_peak(lambda: open_data(parcel, offset))
    assert isinstance(outcome, ParcelError) and "does not decode" in str(outcome)
    assert peak < 1_000_000


def test_data_that_holds_what_it_declares_decodes():
    value = {"rows": [[i, str(i), i / 3] for i in range(200)], "blob": b"x" * 500}
    parcel = _parcel(msgpack.packb(value, use_bin_type=True))
    assert open_data(parcel, open_header(parcel)[4]) == value


def _nested16(size: int, declared: int) -> bytes:
    """array16 headers (3 bytes each), each declaring ``declared`` items: one more header each."""
    return ((b"\xdc" + declared.to_bytes(2, "big")) * (size // 3 + 1))[:size]


def test_a_sized_batch_of_nested_headers_is_refused_at_little_cost():
    """open_batch(sized=True) -- a batch landing in a queue with a byte budget -- reads value by
    value with a streaming Unpacker, which makes each declared list as unpackb does."""
    bomb = (b"\xdd" + (60_000).to_bytes(4, "big")) * 12_000
    data = b"\x92" + bomb  # "an array of 2 values": passes check_array on the way
    parcel = b"\x00\x00\x00\x00" + data
    peak, outcome = traced_peak(lambda: open_batch(parcel, 4, 2, True))
    assert isinstance(outcome, Exception)
    assert peak < 1_000_000, f"{peak:,} bytes allocated for a {len(data):,}-byte batch"


def test_a_parcel_header_of_nested_headers_is_refused_at_little_cost():
    """~680 nested array16 headers declaring 2,046 items each made ~11 MB of a 2 KB header, in
    every house a parcel passes, before any policy."""
    head = _nested16(2_046, 2_046)
    parcel = len(head).to_bytes(4, "big") + head + b"\xc0"
    peak, outcome = traced_peak(lambda: open_header(parcel))
    assert isinstance(outcome, ParcelError)
    assert peak < 1_000_000, f"{peak:,} bytes allocated for a {len(head):,}-byte header"


def test_a_parcel_header_with_extensions_of_nested_headers_is_refused_at_little_cost():
    head = b"\x95" + _nested16(2_045, 2_046)
    parcel = len(head).to_bytes(4, "big") + head + b"\xc0"
    peak, outcome = traced_peak(lambda: open_ext(parcel))
    assert isinstance(outcome, ParcelError)
    assert peak < 1_000_000, f"{peak:,} bytes allocated for a {len(head):,}-byte header"


def test_a_router_opening_a_parcel_whose_header_is_nested_headers_allocates_little():
    """The same header through a live router (every road parcel is opened there)."""
    world = World(seed=5)
    beta = world.routed_estate("beta", ["manor"], policy=ALLOW_ALPHA)
    head = _nested16(2_046, 2_046)
    parcel = len(head).to_bytes(4, "big") + head + b"\xc0"
    peak, outcome = traced_peak(lambda: beta["manor"]._open(parcel))
    assert isinstance(outcome, Exception)  # refused as malformed
    assert peak < 1_000_000, f"{peak:,} bytes allocated for a {len(head):,}-byte header"
