"""A share's packed fields are made once per change: what a read sends, without packing it per read."""

from __future__ import annotations

import msgpack

from flowcast.store import Store


class Counting:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, fields):  # noqa: ANN001, ANN204
        self.calls += 1
        return msgpack.packb(fields, use_bin_type=True)


def test_packed_once_until_the_share_changes():
    share = Store().share("s", {"value": 1})
    pack = Counting()
    first = share.encoded(pack)
    assert share.encoded(pack) == first and pack.calls == 1
    assert first == (len(msgpack.packb({"value": 1})), msgpack.packb({"value": 1}))
    share.update(value=2)
    assert share.encoded(pack)[1] == msgpack.packb({"value": 2}) and pack.calls == 2


def test_two_changes_in_one_tick_are_two_versions():
    share = Store(lambda: 5.0).share("s")
    pack = Counting()
    share.update(value=1)
    share.encoded(pack)
    share.update(value=2)  # same stamp, new version
    assert msgpack.unpackb(share.encoded(pack)[1]) == {"value": 2}


def test_a_default_field_is_in_the_next_packing():
    share = Store().share("s", {"a": 1})
    pack = Counting()
    share.encoded(pack)
    share.default("b", 0.0)  # not a change (no new version), but the fields are others
    assert msgpack.unpackb(share.encoded(pack)[1]) == {"a": 1, "b": 0.0}


def test_over_the_limit_only_the_length_is_kept():
    share = Store().share("s", {"value": b"x" * 1000})
    pack = Counting()
    size, data = share.encoded(pack, limit=100)
    assert data is None and size > 1000
    assert share.encoded(pack, limit=100) == (size, None) and pack.calls == 1  # still too big: not packed again
    assert share.encoded(pack, limit=2000)[1] is not None and pack.calls == 2  # a larger limit: packed and kept
