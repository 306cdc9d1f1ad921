"""Every mistake in a flow script is a FlowError at file:line:col, with the line and a caret."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowcast.flow.errors import FlowError, FlowErrors
from flowcast.flow.floscript import parse_flo
from flowcast.flow.spec import FlowSpec
from flowcast.flow.yamlflow import parse_yaml

HEAD = "house h\nframer f be active\nframe a\n"


def err(text: str) -> FlowError:
    with pytest.raises(FlowError) as info:
        parse_flo(text, "t.flo")
    return info.value


def caret_col(e: FlowError) -> int:
    """The 1-based column the caret stands under in the rendered error."""
    lines = str(e).splitlines()
    return lines[2].index("^") - 4 + 1


def test_rendering_has_location_line_and_caret() -> None:
    e = err(HEAD + "  pritn hello\n")
    lines = str(e).splitlines()
    assert lines[0] == "t.flo:4:3: error: unknown statement 'pritn'"
    assert lines[1] == "      pritn hello"
    assert caret_col(e) == 3
    assert "did you mean 'print'?" in lines[3]


@pytest.mark.parametrize(
    "body, line, col, message, hint",
    [
        # statements and connectives
        ("  pritn hi", 4, 3, "unknown statement 'pritn'", "did you mean 'print'"),
        ("  logger x to y", 4, 3, "not supported by flowcast", "supported statements: "),
        ("  server s", 4, 3, "not supported by flowcast", "supported statements"),
        ("  rear x", 4, 3, "not supported by flowcast", ""),
        ("  put 1 int .x", 4, 9, "unexpected 'int'", "did you mean 'into'"),
        ("  inc .x wiht 1", 4, 10, "expected 'with' or 'from'", "did you mean 'with'"),
        ("  go z if .a or .b", 4, 14, "unexpected 'or'", "joined with 'and'"),
        ("  go z when .a", 4, 8, "expected 'if'", ""),
        ("  do thing wiht x 1", 4, 12, "'wiht'", "did you mean 'with'"),
        ("  do thing at entre", 4, 15, "unknown context 'entre'", "did you mean 'enter'"),
        ("  do thing cum x 1", 4, 12, "'do ... cum' is not supported", ""),
        ("  bid strat z", 4, 7, "unknown bid control 'strat'", "did you mean 'start'"),
        ("  go z if .x >= ", 4, 16, "needs a goal", ""),
        ("  go z if .x is finished", 4, 17, "unknown condition 'is finished'", ""),
        ("  go z if temp re me > 1", 4, 11, "unsupported framer state 'temp'", ""),
        ("  put 1 into .x extra", 4, 17, "unexpected 'extra'", ""),
        ("  put hello-world into .x", 4, 7, "invalid value 'hello-world'", ""),
        ("  put 1x2y into .x", 4, 7, "point value", ""),
        ("  put 3j into .x", 4, 7, "complex number", ""),
        ("  put 1 into a..b", 4, 14, "invalid share path 'a..b'", ""),
        ("  copy .a of cousin into .b", 4, 14, "invalid relation 'cousin'", "relations are"),
        ("  copy frame.x into .b", 4, 8, "incomplete path", ""),
        ("  put value 1 color 2 into .x", 4, 7, "'value' must be the only field", ""),
        ("  timeout soon", 4, 11, "expected a timeout as a number", ""),
        ("  print \"unclosed", 4, 9, "unterminated string", ""),
        ("  enter now", 4, 9, "unexpected 'now'", ""),
        ("  inc .x with red", 4, 15, "'inc' needs numbers", ""),
        ("  aux x as y", 4, 9, "cloned aux framers", ""),
        ("  go z if x in framer zz is done", 4, 23, "unknown framer 'zz'", ""),
    ],
)
def test_statement_errors(body: str, line: int, col: int, message: str, hint: str) -> None:
    e = err(HEAD + body + "\nframe z\nframer x be aux\nframe q\n")
    assert e.where is not None
    assert (e.where.file, e.where.line, e.where.col) == ("t.flo", line, col), str(e)
    assert message in e.message
    assert hint in e.hint
    assert caret_col(e) == col


@pytest.mark.parametrize(
    "text, message",
    [
        ("framer f\n", "'framer' before any house"),
        ("", "flow defines no house"),
        ("# only a comment\n\n", "flow defines no house"),
        ("house h\nframe a\n", "'frame' outside a framer"),
        ("house h\nframer f\nprint x\n", "'print' outside a frame"),
        ("with x\n", "no statement to continue"),
        ("house h\nload x.py\n  with y\n", "cannot start a statement"),
        ("house 1abc\n", "invalid a house name"),
        ("house h\nframer f\nframe next\n", "'next' is reserved"),
        ("house h\nframer f\nframe a\nframe a\n", "frame 'a' already defined"),
        ("house h\nframer f\nframe a\nframer f\n", "framer 'f' already defined"),
        ("house h\nhouse h\n", "house 'h' already defined"),
        ("house h\nframer f be busy\n", "unknown schedule 'busy'"),
        ("house h\nframer f in front\n", "ordering"),
        ("house h\nload other.flo\n", "loading other .flo files"),
    ],
)
def test_structure_errors(text: str, message: str) -> None:
    e = err(text)
    assert message in str(e)
    assert e.where is not None and e.where.line >= 1


# -- names checked once the whole script is read -------------------------------------


def test_go_to_a_frame_defined_later_is_fine() -> None:
    spec = parse_flo(HEAD + "go later\nframe later\n")
    assert spec.house().framers[0].frames[0].acts[0].args["far"] == "later"


def test_unknown_frame_points_at_the_name_with_suggestion() -> None:
    e = err(HEAD + "  go  idel if .x\nframe idle\n")
    assert (e.where.line, e.where.col) == (4, 7)
    assert e.message == "unknown frame 'idel'"
    assert e.hint == "did you mean 'idle'?"


@pytest.mark.parametrize(
    "text, line, col, message",
    [
        ("house h\nframer f\nframe a\n  first  b\n", 4, 10, "unknown first frame 'b'"),
        ("house h\nframer f\nframe a\n  over  b\n", 4, 9, "unknown over frame 'b'"),
        ("house h\nframer f\nframe a\n  next   b\nframe c\n", 4, 10, "unknown next frame 'b'"),
        ("house h\nframer f\nframe a\n  under b\n", 4, 9, "unknown under frame 'b'"),
        ("house h\nframer f\nframe a in  b\n", 3, 13, "unknown over frame 'b'"),
    ],
)
def test_frame_name_errors_point_at_the_name(text: str, line: int, col: int, message: str) -> None:
    e = err(text)
    assert (e.where.line, e.where.col, e.message) == (line, col, message)


def test_misspelt_and_between_conditions() -> None:
    e = err(HEAD + "go z if .a adn .b\nframe z\n")
    assert e.message == "unexpected 'adn' in condition" and e.hint == "did you mean 'and'?"


def test_all_name_errors_reported_together() -> None:
    text = ("house h\nframer f be active first strat\nframe start\n"
            "  go finsh\n  bid stop workr\n  aux helpr\n  go next if helpr is done\n"
            "frame finish in nowhere\n  start ghost\n"
            "framer worker be slave\nframe w\nframer helper be aux\nframe x\n")
    with pytest.raises(FlowErrors) as info:
        parse_flo(text, "t.flo")
    errors = info.value.errors
    got = [(e.where.line, e.message, e.hint) for e in errors]
    assert got == [
        (2, "unknown first frame 'strat'", "did you mean 'start'?"),
        (8, "unknown over frame 'nowhere'", ""),
        (4, "unknown frame 'finsh'", "did you mean 'finish'?"),
        (5, "unknown tasker 'workr'", "did you mean 'worker'?"),
        (7, "unknown tasker 'helpr'", "did you mean 'helper'?"),
        (6, "unknown aux framer 'helpr'", "did you mean 'helper'?"),
        (9, "unknown tasker 'ghost'", ""),
    ]
    assert str(info.value).count("error:") == 7


@pytest.mark.parametrize(
    "text, message",
    [
        ("house h\nframer f\nframe a\n go next\n", "'go next' from 'a', the last frame"),
        ("house h\nframer f\nframe a in b\nframe b in a\n", "frames nest in a loop"),
        ("house h\nframer f\nframe a in a\n", "frames nest in a loop: a in a"),
        ("house h\nframer f\nframe a\naux g\nframer g be active\nframe x\n", "is not 'be aux'"),
        ("house h\nframer f\n", "framer 'f' has no frames"),
        ("house h\nframer f\nframe a\n go a if aux nothere is done\n", "unknown aux framer 'nothere'"),
        ("house h\nframer f\nframe a\n go a if .x is updated in frame zz\n", "unknown frame 'zz'"),
        ("house h\nframer f\nframe a\n under b\nframe b in c\nframe c\n", "cannot be under 'a'"),
    ],
)
def test_whole_script_errors(text: str, message: str) -> None:
    e = err(text)
    assert message in str(e)


def test_deep_nesting_and_long_cycles_are_fine_or_clean() -> None:
    n = 3000
    deep = "house h\nframer f\n" + "".join(f"frame f{i}{f' in f{i - 1}' if i else ''}\n" for i in range(n))
    spec = parse_flo(deep)
    assert spec.house().framers[0].frames[-1].over == f"f{n - 2}"
    cycle = "house h\nframer f\n" + "".join(f"frame f{i} in f{(i + 1) % n}\n" for i in range(n))
    e = err(cycle)
    assert "frames nest in a loop" in str(e)


def test_huge_line_and_binary_junk() -> None:
    e = err("house h\nframer f\nframe a\nprint " + "x" * 1_000_000 + " \"\n")
    assert "unterminated string" in e.message
    e = err("\x00\x01\x02\xff\ufffd garbage \x7f\n")
    assert e.where is not None and e.where.line == 1


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=300))
def test_arbitrary_text_parses_or_raises_flow_error(text: str) -> None:
    try:
        spec = parse_flo(text, "fuzz.flo")
    except FlowError as exc:
        str(exc)  # renders without raising
        return
    assert isinstance(spec, FlowSpec)


FLO_WORDS = st.sampled_from([
    "house", "h", "framer", "f", "frame", "a", "b", "in", "be", "active", "aux", "go", "next", "if", "and",
    "not", ".x", "x.y", ">=", "==", "1", "2.5", "'s'", '"t u"', "elapsed", "goal", "is", "done", "do",
    "thing", "with", "from", "per", "to", "put", "into", "inc", "copy", "set", "print", "bid", "start",
    "stop", "all", "me", "timeout", "repeat", "let", "enter", "exit", "of", "frame", "framer", "+-",
    "\n", "\n", "\n", "\\\n", "#", "under", "over", "first", "via", "updated", "by", "any", "re",
])


@settings(max_examples=500, deadline=None)
@given(st.lists(FLO_WORDS, max_size=60))
def test_word_salad_parses_or_raises_flow_error(words: list[str]) -> None:
    text = "house h\nframer f be active\nframe a\n" + " ".join(words)
    try:
        spec = parse_flo(text, "salad.flo")
    except FlowError as exc:
        assert exc.where is None or exc.where.file == "salad.flo"
        str(exc)
        return
    assert isinstance(spec, FlowSpec)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_yaml_parses_or_raises_flow_error(text: str) -> None:
    try:
        parse_yaml(text, "fuzz.yaml")
    except FlowError as exc:
        str(exc)


@pytest.mark.parametrize("line", ["framer f be active at " + "9" * 400, "framer f be active\nframe a\n  timeout " + "9" * 400,
                                  "framer f be active\nframe a\n  repeat " + "1" * 400 + ".5"])
def test_huge_numbers_are_located_errors_not_crashes(line):
    with pytest.raises(FlowError) as info:
        parse_flo("house h\n" + line + "\n", "big.flo")
    assert "big.flo:" in str(info.value) and ("too large" in str(info.value) or "number" in str(info.value))


# -- where and how errors are shown (issue 10, part 6) -------------------------


def build_err(text: str, name: str = "t.flo"):
    from flowcast.behaving import Registry
    from flowcast.flow.builder import build_house
    from flowcast.flow.skedder import Stamp

    spec = parse_flo(text, name) if name.endswith(".flo") else parse_yaml(text, name)
    with pytest.raises(FlowError) as info:
        build_house(spec.house(), stamp=Stamp(), registry=Registry(), out=lambda _: None)
    return info.value


def test_missing_load_module_is_reported_at_its_load_line() -> None:
    e = build_err("house h\n\nload fc_no_such_module_q\nframer f\nframe a\n")
    assert (e.where.line, e.where.col) == (3, 6), str(e)
    assert "fc_no_such_module_q" in e.message
    y = build_err("house: h\nload:\n  - json\n  - fc_no_such_module_q\nframers:\n  - framer: f\n    frames:\n"
                  "      - frame: a\n", "t.yaml")
    assert (y.where.line, y.where.col) == (4, 5), str(y)


def test_a_huge_line_is_clipped_around_the_column() -> None:
    source = "  go next if .x == " + "y" * 5_000_000 + " zz"
    e = err("house h\nframer f\nframe a\n" + source + "\n")
    text = str(e)
    assert len(text) < 1_000, len(text)  # was the whole 5 MB line, twice
    line, caret = (x[4:] for x in text.splitlines()[1:3])
    assert line.startswith("...") and len(line) <= 3 + 2 * 80 + 3
    assert line[caret.index("^")] == source[e.where.col - 1]  # the caret is under the spot


def test_the_caret_stays_under_the_spot_after_clipping_and_escaping() -> None:
    from flowcast.flow.errors import excerpt

    line = "a" * 300 + "\x00B" + "c" * 300
    shown, caret = excerpt(line, 302)  # the B
    assert shown[caret] == "B" and shown[caret - 4:caret] == "\\x00"
    assert shown.startswith("...") and shown.endswith("...") and len(shown) <= 3 + 80 + 4 + 80 + 3
    short, at = excerpt("\tgo b", 2)
    assert (short, at) == (" go b", 1)  # tabs are one column, as the lexer counts them


def test_control_characters_in_errors_are_escaped() -> None:
    e = err("house h\nframer f\nframe a\n  go b\x00\x1b[31m\u202e if .x\n")
    text = str(e)
    assert "\x00" not in text and "\x1b" not in text and "\u202e" not in text
    assert "\\x00" in text and "\\x1b" in text and "\\u202e" in text
    assert text.isprintable() or set(text) - set(filter(str.isprintable, text)) == {"\n"}


def test_an_aux_loop_is_a_build_error_at_the_aux_that_closes_it() -> None:
    ring = ("house h\nframer main be active first m\nframe m\n  aux a\n"
            "framer a be aux first a1\nframe a1\n  aux b\n"
            "framer b be aux first b1\nframe b1\n  aux a if .go\n")
    e = build_err(ring)
    assert "aux framers run inside each other in a loop: a aux b aux a" in e.message
    assert (e.where.line, e.where.col) == (10, 7), str(e)
    itself = build_err("house h\nframer main be active first m\nframe m\n  aux s\n"
                       "framer s be aux first s1\nframe s1\n  aux s\n")
    assert "s aux s" in itself.message and itself.where.line == 7


def test_an_aux_loop_fails_check_not_the_run(tmp_path) -> None:
    from flowcast.cli.main import main

    path = tmp_path / "ring.flo"
    path.write_text("house h\nframer main be active first m\nframe m\n  aux a\n"
                    "framer a be aux first a1\nframe a1\n  aux b\n"
                    "framer b be aux first b1\nframe b1\n  aux a\n")
    assert main(["check", str(path)]) == 1


def test_invalid_utf8_is_reported_at_line_and_column(tmp_path) -> None:
    from flowcast.flow.floscript import load_flo
    from flowcast.flow.yamlflow import load_yaml

    flo = tmp_path / "bad.flo"
    flo.write_bytes(b"house h\nframer f\nframe a\n  print caf\xc3\xa9 \xe9 ok\n")
    with pytest.raises(FlowError) as info:
        load_flo(flo)
    w = info.value.where
    assert (w.line, w.col) == (4, 14), str(info.value)  # characters, not bytes: é is one column
    assert "not a UTF-8 text file" in info.value.message and "e9" in info.value.message
    yml = tmp_path / "bad.yaml"
    yml.write_bytes(b"house: h\n# \xff\n")
    with pytest.raises(FlowError) as info:
        load_yaml(yml)
    assert (info.value.where.line, info.value.where.col) == (2, 3)


def test_crlf_files_still_read_as_lines(tmp_path) -> None:
    from flowcast.flow.floscript import load_flo

    path = tmp_path / "crlf.flo"
    path.write_bytes(b"house h\r\nframer f\r\nframe a\r\n  print hi\r\n")
    assert load_flo(path).house().framers[0].frames[0].acts[0].args["message"] == "hi"


def test_value_with_other_fields_is_refused_with_the_reason_and_the_way_to_write_it(tmp_path):
    """A deliberate decision (issue 14, item 6): Ioflo's rule is kept, and the error says why and how."""
    from flowcast.flow.loader import load_flow

    bad = tmp_path / "init.flo"
    bad.write_text("house x\ninit .x.t with value 20.0 seq 0\nframer main be active\n  frame a\n")
    with pytest.raises(FlowError) as raised:
        load_flow(bad)
    text = str(raised.value)
    assert "init.flo:2:16" in text and "'value' must be the only field" in text and "init .x with seq 0" in text
    good = tmp_path / "good.flo"
    good.write_text("house x\ninit .x.t with value 20.0\ninit .x.t with seq 0\nframer main be active\n  frame a\n")
    load_flow(good)
