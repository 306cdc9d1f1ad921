"""flowcast/flow/yamlnodes.py: the located YAML reader flows and layouts share.

The point of sharing it is that a YAML flow and an estate layout refuse the
same things with the same words; these tests hold both readers to that.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flowcast.flow.errors import FlowError
from flowcast.flow.yamlflow import parse_yaml
from flowcast.flow.yamlnodes import MAX_ALIAS_EXPANSION, NodeReader
from flowcast.house.layout import LayoutError, load_layout


def layout_error(tmp_path: Path, text: str) -> LayoutError:
    (tmp_path / "f.flo").write_text("house h\n")
    path = tmp_path / "e.yaml"
    path.write_text(text)
    with pytest.raises(LayoutError) as info:
        load_layout(path)
    return info.value


LAYOUT = "estate: e\nhouses:\n  - {name: m, flow: f.flo}\n"


def test_merge_keys_refused_alike_in_flows_and_layouts(tmp_path: Path) -> None:
    with pytest.raises(FlowError) as info:
        parse_yaml("house: h\n<<: {load: x}\n", "f.yaml")
    assert info.value.message == "YAML merge keys ('<<') are not supported in a house"
    assert (info.value.where.line, info.value.where.col) == (2, 1)
    e = layout_error(tmp_path, LAYOUT + "<<: {role: x}\n")
    assert [x.message for x in e.errors] == ["YAML merge keys ('<<') are not supported in the layout"]


def test_a_repeated_key_names_its_first_line_in_flows_as_in_layouts(tmp_path: Path) -> None:
    with pytest.raises(FlowError) as info:
        parse_yaml("house: h\nload: a\nload: b\n", "f.yaml")
    assert info.value.message == "key 'load' given twice in a house (first at line 2)"
    e = layout_error(tmp_path, "estate: e\nestate: f\nhouses:\n  - {name: m, flow: f.flo}\n")
    assert e.errors[0].message == "key 'estate' given twice in the layout (first at line 1)"


def test_an_impossible_date_in_flow_data_is_a_located_error_not_a_crash() -> None:
    # YAML resolves 2024-13-45 as a timestamp and its constructor raises a
    # bare ValueError: the flow reader once let it escape as a traceback.
    with pytest.raises(FlowError) as info:
        parse_yaml("house: h\ninit:\n  - init: .x\n    with: 2024-13-45\n", "f.yaml")
    assert "month must be in 1..12" in info.value.message
    assert (info.value.where.file, info.value.where.line, info.value.where.col) == ("f.yaml", 4, 11)


def test_a_syntax_error_without_a_mark_still_names_the_file() -> None:
    reader = NodeReader("a: [1, 2\n", "x.yaml")
    with pytest.raises(FlowError) as info:
        reader.compose()
    assert info.value.message.startswith("YAML syntax:")
    assert info.value.where is not None and info.value.where.file == "x.yaml"


def test_collecting_reader_gathers_every_problem_and_goes_on() -> None:
    reader = NodeReader("a: 1\nb: 2\na: 3\nc: 4\n", "x.yaml", collect=True)
    root = reader.compose()
    pairs = reader.mapping(root, "the thing", ("a", "b"), required=("d",))
    assert pairs is not None and sorted(pairs) == ["a", "b"]
    assert [e.message for e in reader.errors] == [
        "key 'a' given twice in the thing (first at line 1)",
        "unknown key 'c' in the thing",
        "the thing has no 'd'",
    ]
    assert [e.where.line for e in reader.errors] == [3, 4, 1]


def test_raising_reader_stops_at_the_first_problem() -> None:
    reader = NodeReader("a: 1\nc: 2\nd: 3\n", "x.yaml")
    with pytest.raises(FlowError, match="unknown key 'c'"):
        reader.mapping(reader.compose(), "the thing", ("a",))
    assert reader.errors == []


def test_alias_expansion_is_capped_even_when_collecting() -> None:
    # Each list is read once per alias to it: 100,001 reads of one small list.
    reader = NodeReader("a: &a [1]\n", "x.yaml", collect=True)
    node = reader.compose()
    inner = node.value[0][1]
    for _ in range(MAX_ALIAS_EXPANSION + 1):
        reader.items(inner, "a list")
    with pytest.raises(FlowError, match="too large: YAML aliases expand"):
        reader.items(inner, "a list")


def test_long_lines_are_not_kept_whole_in_positions() -> None:
    text = "a: " + "x" * 5000 + "\n"
    reader = NodeReader(text, "x.yaml", max_shown_line=200)
    node = reader.compose()
    assert isinstance(node, yaml.MappingNode)
    assert len(reader.where(node).text) == 200
    assert len(NodeReader(text, "x.yaml").where(node).text) == len(text) - 1
