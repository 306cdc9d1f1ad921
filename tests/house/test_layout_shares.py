"""The ``shares:`` section of a layout: queue budgets and read limits, reaching every house's store and router."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowcast.house.estate import open_house
from flowcast.house.layout import load_layout
from flowcast.house.layoutshares import SharesSpec
from flowcast.store.store import ERROR_QUEUE_BYTES, QUEUE_BYTES
from tests.house.test_layout import MINIMAL, one_error, tree, write  # noqa: F401 - tree is a fixture

SHARES = """\
shares:
  queue_bytes: 8388608
  error_queue_bytes: 65536
  read_max_bytes: 1024
  read_bytes_per_second: 65536
  reads_per_second: 20
"""


def test_the_section_loads(tree: Path) -> None:
    spec = load_layout(write(tree, MINIMAL + SHARES)).shares
    assert spec == SharesSpec(8 << 20, 64 << 10, 1024, 64 << 10, 20)
    assert spec.read_limits() == {"max_reply": 1024, "bytes_per_second": 64 << 10, "reads_per_second": 20}


def test_no_section_or_an_empty_one_keeps_the_defaults(tree: Path) -> None:
    assert load_layout(write(tree, MINIMAL)).shares is None
    spec = load_layout(write(tree, MINIMAL + "shares:\n")).shares
    assert spec == SharesSpec() and spec.read_limits() == {}


@pytest.mark.parametrize("text, expected", [
    ("shares: {queue_bytes: 10}\n", "outside 4096.."),
    ("shares: {reads_per_second: lots}\n", "must be a whole number"),
    ("shares: {read_max: 10}\n", "read_max"),
])
def test_bad_values_are_located_errors(tree: Path, text: str, expected: str) -> None:
    error = one_error(tree, MINIMAL + text)
    assert expected in str(error) and error.where is not None


def test_every_house_applies_it_to_its_store_and_router(tree: Path) -> None:
    house = open_house(load_layout(write(tree, MINIMAL + SHARES)), "manor")
    try:
        store = house.store
        assert store.queue("inbox").budget == 8 << 20 and store.queue("inbox.error").budget == 64 << 10
        store.share("big").update(blob=b"b" * 2048)
        store.share("answer")
        house.router.send("big@manor.alpha", None, src="answer", tag="read")  # a read within the house
        (report,) = store.get("answer.error").drain()
        assert report["data"]["kind"] == "read_too_large" and "1024 bytes" in report["data"]["reason"]
    finally:
        house.stop()
        house.run()


def test_without_the_section_a_house_has_the_defaults(tree: Path) -> None:
    house = open_house(load_layout(write(tree, MINIMAL)), "manor")
    try:
        assert house.store.queue("inbox").budget == QUEUE_BYTES and house.store.queue("x.error").budget == ERROR_QUEUE_BYTES
    finally:
        house.stop()
        house.run()
