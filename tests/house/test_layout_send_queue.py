"""``send_queue_bytes`` in a layout reaches the road (issue 25, finding 4): what waits for a live remote."""

from __future__ import annotations

from pathlib import Path

from flowcast.house.layout import load_layout
from flowcast.transport.roadsend import DEFAULT_SEND_QUEUE_BYTES
from tests.house.test_layout import MINIMAL, one_error, tree, write  # noqa: F401 - tree is a fixture
from tests.house.test_layout_limits import road_of


def test_send_queue_bytes_loads_and_reaches_the_road(tree: Path) -> None:
    spec = load_layout(write(tree, MINIMAL + "roads: {main: {port: 0, send_queue_bytes: 1048576}}\n")).roads["main"]
    assert spec.stack_options() == {"send_queue_bytes": 1 << 20}
    assert road_of(spec.stack_options()).send_queue_bytes == 1 << 20
    assert road_of({}).send_queue_bytes == DEFAULT_SEND_QUEUE_BYTES


def test_send_queue_bytes_out_of_range_is_a_located_error(tree: Path) -> None:
    error = one_error(tree, MINIMAL + "roads: {main: {port: 0, send_queue_bytes: 10}}\n")
    assert "send_queue_bytes" in str(error) and "outside 65536.." in str(error)
