"""An end-to-end message's outer map comes from anyone: read without letting it declare more than it holds."""

from __future__ import annotations

from flowcast.cast.sealing import SealError, read_outer
from tests.memorykit import traced_peak


def test_an_outer_map_of_nested_headers_declaring_what_is_not_there_is_malformed_at_little_cost():
    bomb = (b"\xdd" + (60_000).to_bytes(4, "big")) * 12_000
    peak, outcome = traced_peak(lambda: read_outer(bomb))
    assert isinstance(outcome, SealError) and "not msgpack" in str(outcome)
    assert peak < 1_000_000
