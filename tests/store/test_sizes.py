"""The size estimate of data routed within a house: never packed, no less than its msgpack for the shapes that make messages big."""

from __future__ import annotations

import msgpack
import pytest

from flowcast.store.sizes import SAMPLE, estimate

SHAPES = [
    b"x" * 100_000,
    "text " * 1000,
    "héllo wörld ✓" * 100,  # not ASCII: up to 4 bytes a character
    {"blob": b"x" * 50_000, "n": 1},
    {"rows": [{"a": i, "b": "x" * 20} for i in range(50)]},
    [{"a": i, "b": "x" * 20} for i in range(50)],
    [b"y" * 1000 for _ in range(100)],  # long: sampled, the rest assumed alike
    {f"k{i}": "v" * 30 for i in range(40)},
    list(range(1000)),
    (1.5, None, True, "s"),
    42,
]


@pytest.mark.parametrize("data", SHAPES, ids=lambda d: type(d).__name__)
def test_the_estimate_is_no_less_than_the_packed_size(data):
    assert estimate(data) >= len(msgpack.packb(data, use_bin_type=True))


def test_a_long_container_is_sampled_not_walked():
    looked = []

    class Opaque:
        def __sizeof__(self) -> int:
            looked.append(1)
            return 100

    assert estimate([Opaque() for _ in range(10_000)]) >= 10_000 * 100
    assert len(looked) == SAMPLE


def test_what_msgpack_cannot_pack_counts_as_its_memory():
    class Opaque:
        def __sizeof__(self) -> int:
            return 12_345

    assert estimate(Opaque()) >= 12_345
    assert estimate({"o": Opaque()}) > 12_345
    assert estimate(memoryview(b"m" * 4000)) >= 4000
