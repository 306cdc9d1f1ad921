"""A house's tick: a framer faster than it is said, not silently slowed; an estate's tick from --period or the layout (issue 14, item 6)."""

from __future__ import annotations

import logging

import pytest

from flowcast.house.handoff import Handoff
from flowcast.house.house import load_house
from flowcast.house.layout import LayoutError, load_layout
from flowcast.transport.lanekeys import LaneKeys, new_secret


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


# -- an estate's tick: flowcast run LAYOUT --period, or the layout's period: ------------------------


def _layout(tmp_path, extra: str = ""):
    (tmp_path / "idle.flo").write_text("house idle\nframer idle be active first rest\n  frame rest\n    print resting\n")
    path = tmp_path / "abc.yaml"
    path.write_text(f"estate: abc\nhouses:\n  - {{name: manor, flow: idle.flo, manor: true}}\n{extra}\n")
    return path


def test_a_layout_may_give_the_houses_tick(tmp_path):
    assert load_layout(_layout(tmp_path)).period is None
    assert load_layout(_layout(tmp_path, "period: 0.05")).period == 0.05
    assert load_layout(_layout(tmp_path, "period: 1")).period == 1.0


@pytest.mark.parametrize("value, says", [("0", "outside 0.001..60 seconds"), ("fast", "must be a number of seconds"),
                                         ("[1]", "must be a number of seconds, not a list"), (".inf", "outside")])
def test_a_bad_period_is_a_located_error(tmp_path, value, says):
    with pytest.raises(LayoutError) as raised:
        load_layout(_layout(tmp_path, f"period: {value}"))
    assert says in str(raised.value) and "abc.yaml:4:" in str(raised.value)


def test_the_hand_off_carries_the_period_and_refuses_a_bad_one():
    keys = LaneKeys.derive(new_secret(), "manor", ["manor"])
    given = Handoff("manor", "/x/abc.yaml", "estate: abc\n", 1, ("manor",), keys, None, 0.05)
    assert Handoff.decode(given.encode()).period == 0.05
    assert Handoff.decode(Handoff("manor", "/x/abc.yaml", "", 1, ("manor",), keys).encode()).period == 0.125
    bad = given.encode().replace(b'"period": 0.05', b'"period": -1')
    with pytest.raises(ValueError):
        Handoff.decode(bad)


def test_the_command_line_period_wins_then_the_layouts_then_the_default(tmp_path, monkeypatch, capsys):
    """Was: 'flowcast run LAYOUT --period 0.05' was ignored without a word (issue 14, item 6)."""
    import flowcast.house.estate as estate
    from flowcast.cli.main import main

    seen = []
    monkeypatch.setattr(estate, "_supervise", lambda layout, text, plan, total, out, events=None, period=0.125: seen.append(period) or 0)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    plain, keyed = _layout(tmp_path / "a"), _layout(tmp_path / "b", "period: 0.5")
    assert main(["run", str(plain), "--houses", "1"]) == 0
    assert main(["run", str(keyed), "--houses", "1"]) == 0
    assert main(["run", str(keyed), "--houses", "1", "--period", "0.05"]) == 0
    assert seen == [0.125, 0.5, 0.05]
    assert main(["run", str(keyed), "--period", "0"]) == 2 and "--period must be" in capsys.readouterr().err
