"""YAML flows mean what FloScript means; .flo -> model -> YAML -> model is lossless."""

from __future__ import annotations

import glob
import importlib.util
import re
from pathlib import Path

import pytest

from flowcast.flow.convert import main as convert_main
from flowcast.flow.errors import FlowError
from flowcast.flow.floscript import load_flo, parse_flo
from flowcast.flow.loader import load_flow
from flowcast.flow.yamlflow import dump_yaml, parse_yaml

ROOT = Path(__file__).resolve().parents[2]
# Ioflo's example plans wherever ioflo is installed (a worktree has no .venv of its own).
PLANS = sorted(glob.glob(str(Path(importlib.util.find_spec("ioflo").origin).parent / "app/plan/*.flo")))
OURS = sorted(glob.glob(str(ROOT / "flows/*.flo")) + glob.glob(str(ROOT / "tests/flow/corpus/*.flo")))

FLO = """\
house demo
load behaviors/counter.py
init .count with 0
init .color with red 1 green 2
init value in .copy from depth in .state
log .count
framer main be active at 0.25 first two via .top.
  frame one
    do counter step as counter1 via .c. with step 1 per limit 5 from .count from v in .x to .out at enter
    put 3 into .count
    inc .count with 2
    inc .count from .step
    copy .count into value in .copy
    set elapsed with 2.5
    set goal.depth from .target
    print hello "world"
    bid run side at 0.5
    bid stop side me
    ready side
    start side
    run side
    stop side
    abort side
    done me
    exit
      print bye
    go two if elapsed >= goal and not .count > 4 +- 1
    go next if .x is updated in frame by m
    let if .ok
    timeout 2
    repeat 3
    aux helper
    aux helper if any is done
  frame two in one
    next one
  frame three
    under four
  frame four
framer side be slave
  frame s1
framer helper be aux
  frame h1
"""

YAML = """\
house: demo
load: behaviors/counter.py
init:
  - {init: .count, with: 0}
  - {init: .color, with: {red: 1, green: 2}}
  - {init: value in .copy, from: depth in .state}
log: [.count]
framers:
  - framer: main
    be: active
    at: 0.25
    first: two
    via: .top.
    frames:
      - frame: one
        aux:
          - helper
        acts:
          - do: counter step
            as: counter1
            via: .c.
            with: {step: 1}
            per: {limit: 5}
            from: [.count, v in .x]
            to: .out
            at: enter
          - put: 3
            into: .count
          - {inc: .count, with: 2}
          - {inc: .count, from: .step}
          - {copy: .count, into: value in .copy}
          - {set: elapsed, with: 2.5}
          - {set: goal.depth, from: .target}
          - print: hello "world"
          - {bid: run, taskers: side, period: 0.5}
          - {bid: stop, taskers: [side, me]}
          - ready: side
          - start: side
          - run: side
          - stop: side
          - abort: side
          - done: me
          - {print: bye, at: exit}
          - go: two
            if: [elapsed >= goal, not .count > 4 +- 1]
          - {go: next, if: .x is updated in frame by m}
          - let: .ok
          - timeout: 2
          - repeat: 3
          - {aux: helper, if: any is done}
      - frame: two
        in: one
        next: one
      - frame: three
        under: four
      - frame: four
  - framer: side
    be: slave
    frames: [{frame: s1}]
  - framer: helper
    be: aux
    frames: [{frame: h1}]
"""


def test_yaml_means_the_same_as_floscript() -> None:
    from_flo = parse_flo(FLO, "demo.flo")
    from_yaml = parse_yaml(YAML, "demo.yaml")
    assert from_yaml.houses == from_flo.houses
    # the acts that differ only in how people write them
    acts = from_yaml.house().framers[0].frames[0].acts
    assert [a.args["human"] for a in acts if a.verb == "go"] == [
        "go two if elapsed >= goal and not .count > 4 +- 1", "go next if .x is updated in frame by m",
        "timeout 2", "repeat 3"]


def test_dump_of_demo_reads_back_and_is_stable() -> None:
    spec = parse_flo(FLO, "demo.flo")
    text = dump_yaml(spec)
    again = parse_yaml(text, "demo.yaml")
    assert again.houses == spec.houses
    assert dump_yaml(again) == text


def test_docs_examples_mean_the_same() -> None:
    text = (ROOT / "docs/flows.md").read_text()
    flo = re.search(r"```\n(# traffic.*?)```", text, re.S)
    yml = re.findall(r"```yaml\n(.*?)```", text, re.S)
    assert flo and yml
    assert parse_yaml(yml[-1], "doc.yaml").houses == parse_flo(flo.group(1), "doc.flo").houses


def test_several_houses_round_trip() -> None:
    spec = parse_flo("house a\nframer f\nframe x\nhouse b\nframer g be active\nframe y\n")
    text = dump_yaml(spec)
    assert text.startswith("houses:")
    assert parse_yaml(text).houses == spec.houses


@pytest.mark.parametrize("path", OURS + PLANS, ids=lambda p: Path(p).name)
def test_round_trip_or_clean_refusal(path: str) -> None:
    """Every example parses and round-trips -- or, for Ioflo plans outside the subset, fails cleanly."""
    try:
        spec = load_flo(path)
    except FlowError as exc:
        assert path in PLANS, f"flowcast's own flow failed: {exc}"
        text = str(exc)
        assert exc.where is not None and exc.where.file == path
        assert f"{path}:{exc.where.line}:{exc.where.col}: error: " in text
        assert "^" in text
        return
    text = dump_yaml(spec)
    assert parse_yaml(text, "x.yaml").houses == spec.houses


def test_ioflo_plans_outside_the_subset_say_not_supported() -> None:
    refused = []
    for path in PLANS:
        try:
            load_flo(path)
        except FlowError as exc:
            refused.append((Path(path).name, exc.message))
    names = dict(refused)
    assert "not supported by flowcast" in names["testServer.flo"]
    assert "not supported by flowcast" in names["testClone.flo"]
    assert "not supported by flowcast" in names["box2.flo"]  # logger
    assert len(refused) < len(PLANS)  # and many parse


def test_at_least_the_basic_ioflo_plans_parse() -> None:
    ok = set()
    for path in PLANS:
        try:
            load_flo(path)
            ok.add(Path(path).name)
        except FlowError:
            pass
    assert {"box1.flo", "basic.flo", "testSlave.flo", "testMarker.flo", "testPeriodChange.flo"} <= ok


# -- errors in YAML point into the YAML ---------------------------------------------


def err(text: str) -> FlowError:
    with pytest.raises(FlowError) as info:
        parse_yaml(text, "f.yaml")
    return info.value


def test_unknown_key_with_suggestion() -> None:
    e = err("house: h\nframers:\n  - framer: f\n    frams: []\n")
    assert (e.where.line, e.where.col) == (4, 5)
    assert "unknown key 'frams'" in e.message and "did you mean 'frames'" in e.hint


def test_condition_error_points_inside_scalar() -> None:
    e = err("house: h\nframers:\n- framer: f\n  frames:\n  - frame: a\n    acts:\n    - go: a\n      if: .x >= 1 or .y\n")
    assert (e.where.line, e.where.col) == (8, 19)
    assert "'or'" in e.message
    assert str(e).splitlines()[2].index("^") == 4 + 18


def test_quoted_condition_columns() -> None:
    e = err("house: h\nframers:\n- framer: f\n  frames:\n  - frame: a\n    acts:\n    - {go: a, if: 'elapsed >> 2'}\n")
    assert (e.where.line, e.where.col) == (7, 28)


def test_unknown_frame_in_yaml_go() -> None:
    e = err("house: h\nframers:\n- framer: f\n  frames:\n  - frame: idle\n    acts:\n    - go: idel\n")
    assert e.where.line == 7 and e.where.col == 11
    assert "did you mean 'idle'" in e.hint


def test_yaml_syntax_error_located() -> None:
    e = err("house: h\nframers: [\n")
    assert e.where is not None and e.where.file == "f.yaml"
    assert "YAML syntax" in e.message


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty YAML flow"),
        ("- a\n- b\n", "a house must be a mapping"),
        ("house: h\nhouse: g\n", "given twice"),
        ("framers: []\n", "needs 'house: NAME'"),
        ("house: h\nframers:\n- framer: f\n  be: busy\n", "unknown schedule"),
        ("house: h\nframers:\n- framer: f\n  frames:\n  - frame: a\n    acts:\n    - {put: 1}\n", "into"),
        ("house: h\nframers:\n- framer: f\n  frames:\n  - frame: a\n    acts:\n    - {go: a, at: enter}\n",
         "unknown key 'at'"),
        ("house: h\nframers:\n- framer: f\n  frames:\n  - frame: a\n    acts:\n    - {jump: a}\n", "no verb"),
        ("house: h\nframers:\n- framer: f\n  frames:\n  - frame: a\n    acts:\n    - {inc: .x, with: red}\n",
         "needs numbers"),
        ("house: h\ninit:\n- {init: .x, with: {value: [1, 2]}}\n", "single value"),
        ("house: h\ninit:\n- {init: .x, with: 2020-01-01}\n", "not date"),
    ],
)
def test_yaml_errors(text: str, message: str) -> None:
    e = err(text)
    assert message in str(e)
    assert e.where is not None


def test_alias_expansion_is_bounded() -> None:
    doc = "house: h\nframers:\n- framer: f\n  frames:\n"
    doc += "  - frame: a\n    acts: &acts [" + ",".join(["{print: x}"] * 200) + "]\n"
    doc += "".join(f"  - frame: b{i}\n    acts: *acts\n" for i in range(1000))
    e = err(doc)
    assert "flow too large" in e.message


def test_aliases_within_bounds_are_fine() -> None:
    doc = ("house: h\nframers:\n- framer: f\n  frames:\n"
           "  - {frame: a, acts: &acts [{print: x}, {put: 1, into: .x}]}\n  - {frame: b, acts: *acts}\n")
    frames = parse_yaml(doc).house().framers[0].frames
    assert frames[0].acts == frames[1].acts and len(frames[1].acts) == 2


# -- loader and convert -------------------------------------------------------------


def test_load_flow_by_extension(tmp_path: Path) -> None:
    (tmp_path / "a.flo").write_text("house h\nframer f\nframe x\n")
    (tmp_path / "a.yml").write_text("house: h\nframers: [{framer: f, frames: [{frame: x}]}]\n")
    (tmp_path / "a.txt").write_text("")
    assert load_flow(tmp_path / "a.flo").houses == load_flow(tmp_path / "a.yml").houses
    with pytest.raises(FlowError, match="unknown kind of flow file"):
        load_flow(tmp_path / "a.txt")
    with pytest.raises(FlowError, match="cannot read flow"):
        load_flow(tmp_path / "missing.flo")


def test_convert_flo_to_yaml_and_yaml_to_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "demo.flo"
    src.write_text(FLO)
    out = tmp_path / "demo.yaml"
    assert convert_main([str(src), str(out)]) == 0
    assert load_flow(out).houses == load_flo(src).houses
    again = tmp_path / "again.yaml"
    assert convert_main([str(out), str(again)]) == 0
    assert load_flow(again).houses == load_flo(src).houses


def test_convert_reports_errors_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "bad.flo"
    src.write_text("house h\nframer f\nframe a\n  go nowhere\n")
    out = tmp_path / "bad.yaml"
    assert convert_main([str(src), str(out)]) == 1
    assert not out.exists()
    err_text = capsys.readouterr().err
    assert f"{src}:4:6: error: unknown frame 'nowhere'" in err_text
    assert convert_main([str(src), str(tmp_path / "x.flo")]) == 1
    assert "can only write YAML" in capsys.readouterr().err


# -- generated flows round-trip -------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_names = st.sampled_from(["alpha", "beta", "x1", "depth", "mode"])
_paths = st.sampled_from([".a.b", "a.b", "x of me", "x of framer", "x of frame", "x of frame b", "frame.b.x",
                          "actor.act.x", "x of actor", ".s of framer f", "x of frame main"])
_text = st.text(alphabet=st.characters(blacklist_categories=["Cs", "Cc"], blacklist_characters="\"'"), max_size=8)
_goals = st.one_of(
    st.integers(-10**6, 10**6).map(str),
    st.floats(allow_nan=False, allow_infinity=False, width=32).map(repr),
    _text.map(lambda t: f'"{t}"'),
    st.sampled_from(["true", "false", "none", "goal.x", "v in .g"]),
)
_data_values = st.one_of(st.integers(-1000, 1000).map(str), st.sampled_from(["2.5", "green", "'two words'", "yes"]))
_ops = st.sampled_from(["==", "!=", "<", "<=", ">=", ">"])


@st.composite
def _need(draw: st.DrawFn) -> str:
    kind = draw(st.integers(0, 7))
    neg = "not " if draw(st.booleans()) else ""
    if kind == 0:
        return f"{neg}{draw(_paths)}"
    if kind == 1:
        tol = f" +- {draw(st.integers(0, 5))}" if draw(st.booleans()) else ""
        return f"{neg}{draw(_paths)} {draw(_ops)} {draw(_goals)}{tol}"
    if kind == 2:
        return f"{neg}{draw(st.sampled_from(['elapsed', 'recurred']))} {draw(_ops)} " \
               f"{draw(st.sampled_from(['goal', '1', '2.5', '.lim']))}"
    if kind == 3:
        return f"{neg}{draw(st.sampled_from(['any', 'all', 'aux x', 'x in frame me', 'all in framer']))} is done"
    if kind == 4:
        return f"{neg}g is {draw(st.sampled_from(['readied', 'started', 'running', 'stopped', 'aborted']))}"
    if kind == 5:
        place = draw(st.sampled_from(["", " in frame", " in frame b", " by m", ' by "two m"']))
        return f"{neg}{draw(_paths)} is {draw(st.sampled_from(['updated', 'changed']))}{place}"
    if kind == 6:
        return f"{neg}g is done"
    return f"{neg}depth in {draw(_paths)} {draw(_ops)} {draw(_goals)}"


@st.composite
def _act(draw: st.DrawFn) -> str:
    choice = draw(st.integers(0, 12))
    data = " ".join(f"{n} {v}" for n, v in zip(draw(st.lists(_names, min_size=1, max_size=3, unique=True)),
                                             draw(st.lists(_data_values, min_size=3, max_size=3))))
    if choice == 0:
        return f"put {draw(_data_values)} into {draw(_paths)}"
    if choice == 1:
        return f"put {data} into {draw(_paths)}"
    if choice == 2:
        return f"copy {draw(_paths)} into f1 f2 in {draw(_paths)}"
    if choice == 3:
        return f"inc {draw(_paths)} with {draw(st.integers(-5, 5))}"
    if choice == 4:
        return f"set {draw(st.sampled_from(['elapsed', 'recurred', 'goal.x']))} with {draw(_data_values)}"
    if choice == 5:
        return f"do thing part with {data} per {data} from {draw(_paths)} to {draw(_paths)} at enter"
    if choice == 6:
        return f"go b if {' and '.join(draw(st.lists(_need(), min_size=1, max_size=3)))}"
    if choice == 7:
        return f"timeout {draw(st.sampled_from(['1', '2.5', '0.125', '10']))}"
    if choice == 8:
        return f"let if {draw(_need())}"
    if choice == 9:
        words = draw(st.sampled_from(["hello", '"a b"', "x y z"]))
        return f"print {words}"
    if choice == 10:
        return f"bid {draw(st.sampled_from(['start', 'stop', 'run']))} g at {draw(st.sampled_from(['1.0', '.p']))}"
    if choice == 11:
        return f"aux x if {draw(_need())}"
    return draw(st.sampled_from(["exit", "renter", "recur", "native"]))


@settings(max_examples=150, deadline=None)
@given(st.lists(_act(), max_size=12))
def test_generated_flows_round_trip(lines: list[str]) -> None:
    text = ("house h\nframer f be active\nframe a\n" + "\n".join(lines) +
            "\nframe b\nframer g be slave\nframe q\nframer x be aux\nframe r\n")
    spec = parse_flo(text, "gen.flo")
    assert parse_yaml(dump_yaml(spec), "gen.yaml").houses == spec.houses


@pytest.mark.parametrize("word", ["on", "off", "yes", "No", "ON"])
def test_a_bare_yaml_1_1_boolean_word_is_refused_with_the_fix(word: str) -> None:
    """``put: on`` read as True: a thermostat comparing with "on" never matched, with no error."""
    text = f"house: h\nframers:\n- framer: f\n  frames:\n  - frame: a\n    acts:\n    - {{put: {word}, into: .fan}}\n"
    with pytest.raises(FlowError) as caught:
        parse_yaml(text, "t.yaml")
    said = str(caught.value)
    assert f"t.yaml:7:13: error: put data {word!r} reads as a YAML boolean" in said
    assert f'write "{word}" in quotes for the text, or true or false for a boolean' in said
    quoted = parse_yaml(text.replace(f"put: {word}", f'put: "{word}"'), "t.yaml")
    assert quoted.houses[0].framers[0].frames[0].acts[0].args["data"] == {"value": word}  # the text, as meant
    true = parse_yaml(text.replace(f"put: {word}", "put: true"), "t.yaml")
    assert true.houses[0].framers[0].frames[0].acts[0].args["data"] == {"value": True}
