"""A framer faster than its house's tick is said, not silently slowed (issue 14, item 6)."""

from __future__ import annotations

import logging

from flowcast.house.house import load_house


def _flow(tmp_path, period: float):
    path = tmp_path / "fast.flo"
    path.write_text(f"house x\ninit .x.n with value 0\nframer main be active at {period} first a\n  frame a\n    inc .x.n with 1\n")
    return path


def test_a_framer_faster_than_the_house_tick_is_warned_about(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="flowcast.house"):
        house = load_house(_flow(tmp_path, 0.1), period=0.125, virtual=True)
        house.close()
    (said,) = [r.getMessage() for r in caplog.records if r.name == "flowcast.house"]
    assert "framer main asks to run every 0.1 s, but the house ticks every 0.125 s" in said and "--period" in said


def test_a_framer_at_or_slower_than_the_tick_is_not(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="flowcast.house"):
        load_house(_flow(tmp_path, 0.25), period=0.125, virtual=True).close()
        load_house(_flow(tmp_path, 0.1), period=0.1, virtual=True).close()
    assert [r for r in caplog.records if r.name == "flowcast.house"] == []
