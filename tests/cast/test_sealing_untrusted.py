"""An end-to-end message's outer map comes from anyone: read without letting it declare more than it holds."""

from __future__ import annotations

import tracemalloc

import pytest

from flowcast.cast.sealing import SealError, read_outer


def test_an_outer_map_of_nested_headers_declaring_what_is_not_there_is_malformed_at_little_cost():
    bomb = (b"\xdd" + (60_000).to_bytes(4, "big")) * 12_000
    tracemalloc.start()
    try:
        with pytest.raises(SealError, match="not msgpack"):
            read_outer(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000
