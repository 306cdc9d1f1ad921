"""The estate layout's ``export:`` section, the hand-off that carries it, and ``flowcast run LAYOUT``'s options.

The end-to-end run (two estates recording, then ``flowcast export``) is
tests/house/test_estate_export.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flowcast.house.handoff import Handoff
from flowcast.house.layout import LayoutError, load_layout
from flowcast.house.layoutexport import EXPORT_NAME
from flowcast.transport.lanekeys import LaneKeys, new_secret


def layout(tmp_path: Path, export: str, estate: str = "abc") -> Path:
    flows = tmp_path / "flows"
    flows.mkdir(exist_ok=True)
    (flows / "idle.flo").write_text("house idle\nframer idle be active first rest\n  frame rest\n    print resting\n")
    path = tmp_path / "abc.yaml"
    path.write_text(f"""estate: {estate}
houses:
  - {{name: manor, flow: flows/idle.flo, manor: true}}
  - {{name: w1, flow: flows/idle.flo}}
{export}
""")
    return path


def test_forms_of_the_section(tmp_path):
    base = tmp_path.resolve()
    assert load_layout(layout(tmp_path, "")).export is None  # no section: nothing recorded
    default = load_layout(layout(tmp_path, "export:"))
    assert default.export == default.run / "events" == base / "run" / "abc" / "events"
    assert load_layout(layout(tmp_path, "export: {}")).export == default.export
    assert load_layout(layout(tmp_path, "export: out/ev")).export == base / "out" / "ev"  # the layout's folder, like every path
    assert load_layout(layout(tmp_path, "export: {dir: out/ev}")).export == base / "out" / "ev"
    assert load_layout(layout(tmp_path, "export: /abs/ev")).export == Path("/abs/ev")
    # an estate name with dots is fine without the section
    assert load_layout(layout(tmp_path, "", estate="a.b")).export is None


@pytest.mark.parametrize("export, says, line", [
    ("export: [1, 2]", "export must be a directory or a mapping {dir: DIR}, not a list", 5),
    ("export: true", "export is 'true'; it names a directory", 5),
    ("export: {dir: x, every: 2}", "unknown key 'every' in export", 5),
    ("export: {dir: [x]}", "export dir must be text", 5),
    ("export: {dir: ''}", "export dir is ''; a path has 1-4096 characters", 5),
    ("export: abc.yaml", "export dir", 5),  # exists and is not a directory
])
def test_bad_values_are_located_errors(tmp_path, export, says, line):
    with pytest.raises(LayoutError) as raised:
        load_layout(layout(tmp_path, export))
    text = str(raised.value)
    assert says in text
    assert f"abc.yaml:{line}:" in text


def test_an_exporting_estate_is_named_for_file_names(tmp_path):
    with pytest.raises(LayoutError) as raised:
        load_layout(layout(tmp_path, "export:", estate="a.b"))
    text = str(raised.value)
    assert "abc.yaml:1:9: error: estate name 'a.b' cannot name export files" in text


def test_the_export_alphabet_is_the_exports(tmp_path):
    from flowcast.export import layout as export_layout

    assert EXPORT_NAME.pattern == export_layout._PART.pattern


def test_the_hand_off_carries_the_export_dir():
    keys = LaneKeys.derive(new_secret(), "w1", ["manor", "w1"])
    plain = Handoff("w1", "/x/abc.yaml", "estate: abc\n", 2, ("manor", "w1"), keys)
    assert Handoff.decode(plain.encode()).export is None
    given = Handoff("w1", "/x/abc.yaml", "estate: abc\n", 2, ("manor", "w1"), keys, "/x/events")
    decoded = Handoff.decode(given.encode())
    assert (decoded.export, decoded.yard, decoded.yards) == ("/x/events", "w1", ("manor", "w1"))


def test_estate_option_is_refused_for_a_layout_and_export_is_not(tmp_path, capsys, monkeypatch):
    import flowcast.house.estate as estate
    from flowcast.cli.main import main

    path = layout(tmp_path, "")
    assert main(["run", str(path), "--estate", "here"]) == 2
    assert "--estate apply to a flow script, not an estate layout (an estate's name is its layout's 'estate:')" in capsys.readouterr().err
    seen = {}
    monkeypatch.setattr(estate, "launch", lambda flow, **options: seen.update(options) or 0)
    assert main(["run", str(path), "--export", "ev"]) == 0
    assert seen == {"houses": None, "export": Path("ev"), "period": None}


def test_an_unwritable_export_dir_stops_the_launch(tmp_path, capsys):
    from flowcast.house.estate import launch

    (tmp_path / "file").write_text("")
    assert launch(layout(tmp_path, ""), houses=1, export=tmp_path / "file" / "ev", out=lambda line: None) == 2
    assert f"cannot export to {tmp_path / 'file' / 'ev'}" in capsys.readouterr().err
