"""A routed parcel's data is another estate's msgpack: decoded without letting it declare more than it holds."""

from __future__ import annotations

import tracemalloc

import msgpack
import pytest

from flowcast.routing.parcel import ParcelError, encode, open_data, open_header, route_bytes
from flowcast.routing.route import Route


def _parcel(data: bytes) -> bytes:
    src, dst = Route.parse("out@worker.alpha/main"), Route.parse("in@worker.beta/main")
    return encode(msgpack.Packer(use_bin_type=True).pack, route_bytes(src) + route_bytes(dst), "", 1.0, data)


def test_data_of_nested_headers_declaring_what_is_not_there_is_refused_at_little_cost():
    bomb = (b"\xdd" + (60_000).to_bytes(4, "big")) * 12_000  # 60 KB; msgpack.unpackb made ~80 MB of it
    parcel = _parcel(bomb)
    offset = open_header(parcel)[4]
    tracemalloc.start()
    try:
        with pytest.raises(ParcelError, match="does not decode"):
            open_data(parcel, offset)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000


def test_data_that_holds_what_it_declares_decodes():
    value = {"rows": [[i, str(i), i / 3] for i in range(200)], "blob": b"x" * 500}
    parcel = _parcel(msgpack.packb(value, use_bin_type=True))
    assert open_data(parcel, open_header(parcel)[4]) == value
