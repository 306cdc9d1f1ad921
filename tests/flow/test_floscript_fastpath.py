"""The parser's fast paths build exactly what the general handlers build.

``floscript`` reads plain one-line ``framer``/``frame``/``go``/``do``/...
statements without Token objects; :mod:`flolex` keeps such lines as words until asked.
Here every script is parsed twice -- as is, and with the fast paths turned
off -- and the two models must match field for field, positions included
(``where`` is left out of dataclass equality, so it is compared here).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from flowcast.flow import floscript
from flowcast.flow.errors import FlowError, FlowErrors
from flowcast.flow.flolex import Statement, chunk, lex, split_lines
from flowcast.flow.floscript import parse_flo


def _dump(value: Any) -> Any:
    """Every field, ``where`` included, with exact types (1 != 1.0 != True)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__,) + tuple(
            (f.name, _dump(getattr(value, f.name))) for f in dataclasses.fields(value))
    if isinstance(value, dict):
        return ("dict",) + tuple((_dump(k), _dump(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return (type(value).__name__,) + tuple(_dump(v) for v in value)
    return (type(value).__name__, repr(value))


def _outcome(text: str) -> Any:
    try:
        return ("ok", _dump(parse_flo(text, "t.flo")))
    except FlowError as exc:
        subs = exc.errors if isinstance(exc, FlowErrors) else [exc]
        return ("error", str(exc), tuple(_dump(e.where) for e in subs))
    except Exception as exc:  # noqa: BLE001 -- e.g. OverflowError for a huge period: must match too
        return ("raised", type(exc).__name__, str(exc))


def _general(monkeypatch: pytest.MonkeyPatch, text: str) -> Any:
    with monkeypatch.context() as m:
        m.setattr(floscript._Parser, "fast", {})
        return _outcome(text)


BODY = """\
framer {f} be active first a
  frame a
    go b if elapsed >= 1.0
  frame b
    go a"""

SCRIPTS = [
    "house h\n" + BODY.format(f="f1"),
    # the same statements, written in ways the fast paths must leave alone or read alike
    "house h\nframer f1 be active first a # comment\n  frame a\n    go b if elapsed >= 1.0\n  frame b\n    go a",
    "house h\nframer f1 be active \\\n first a\n  frame a\n    go b if elapsed >= 1.0\n  frame b\n    go a",
    "house h\nframer f1 be active\n first a\n  frame a\n    go b\n     if elapsed >= 1.0\n  frame b\n    go a",
    "house h\nframer f1 be active\n\n# note\n  first a\n  frame a\n    go b\n\n    if recurred > 2\n  frame b\n    go a",
    "house h\r\nframer\tf1  be\tactive first   a\r\n\tframe a\r\n\t\tgo b if elapsed >= 1.0\r\n  frame b\r\n    go a\r\n",
    "house h\rframer f1 be active first a\r  frame a\r    go b if elapsed >= 1.0\r  frame b\r    go a\r",
    "house h\nframer f1\x0bbe active\u00a0first a\n  frame a\u2028  go b if elapsed >= 1.0\n  frame b\n    go a",
    "house h\nframer 'f1' be active first a\n  frame \"a\"\n    go 'b' if elapsed >= 1.0\n  frame b\n    go a",
    "house h\nframer f1 be active first a\n  frame a\n    go b if elapsed >= '1.0'\n  frame b\n    go a",
    "house h\nframer été be active first ä\n  frame ä\n    go b if elapsed >= 1.0\n  frame b\n    go ä",
    # options in other orders, repeated, and the ones only the general path reads
    "house h\nframer f1 first b be slave at 0.5 be aux first a\n  frame a in b\n  frame b in a in c\n  frame c\n"
    "    go a if recurred == 3\n    go next if elapsed < -2.\n    go me if elapsed != +4\n  frame d",
    "house h\nframer f1 at -1 at 2 via .x.y\n  frame a via here\n    go b if .x.y >= 2\n  frame b in a\n"
    "    go a if elapsed >= 1 +- 0.5\n    go a if not elapsed >= 1\n    go a if elapsed re me >= 1\n    go a if elapsed >= goal",
    "house h\nframer f1 at 0x10\n  frame a\n    go b if elapsed >= 1e5\n  frame b\n    go a if elapsed >= 1.0 and recurred >= 2",
    "house h\nframer f1 at 99999999999999999999999999999999999999999999999999999999999999999999999999999999"
    "9999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999"
    "9999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999"
    "99999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999\n  frame a",
    "house h\nload x\nframer f1\n  frame a\n    go a",
    "house h\nlog .a\n if 1\nframer f1\n  frame a\n    go a\n    and more",
    # the other fast statements
    "house h\nframer f1\n  frame a\n    timeout 2.5\n    repeat 3\n    timeout -1\n    repeat 2.7\n"
    "    timeout 1e5\n    repeat 0x10\n    timeout +0\n  frame b\n    go a",
    "house h\nframer x be aux\n  frame a\nframer f1\n  frame a\n    aux x\n    aux x if elapsed >= 1\n    aux x",
    "house h\nframer f1\n  frame a\n    print\n    print hello world\n    print hello  'big   world' # c\n"
    "    exit\n    print bye\n    print to be or not\n    print 1\n  frame b\n    print b",
    "house h\nframer f1\n  frame a\n    do counter\n    do controller pid depth\n    do a.b c\n    enter\n"
    "    do x\n    native\n    do y\n    exit\n    do x at enter\n    do x as y\n    do x with a 1\n    do x_1",
    "house h\nenter\nframer f1\n  frame a\n    exit\n    recur\n    do a\n    benter\n    do b\n    renter\n"
    "    print c\n    precur\n    do d\n    rexit\n    do z\n    native\n    print x",
    "house h\nframer f1 via .box.f1 at 1 via box.\n  frame a via sub\n    put 1 into .x.y\n    put yes into state\n"
    "    put -2.5 into framer.g\n    put none into .a\n    put green into a.b\n    put .p.q into p\n    put 0x1f into .h\n"
    "    put 1e5 into .h\n    put 12N3.5 into .h\n    exit\n    put off into .x\n    inc .n with 1\n    inc n with -0.5\n"
    "    inc .n with 12S3.5\n    native\n    inc .n with 0x10\n  frame b in a via .a.\n    put 1 into frame.b.x\n"
    "    put 1 into actor.b.x\n    put 1 into x of framer\n        put 1 into value in .x\n"
    "    put value 1 into .x\n    inc value in .n with 1\n    inc .n from .m\n  frame c via sub of frame me\n"
    "  frame d via frame.c.x\nframer f2 via sub of framer f1\n  frame a",
    "house h\nframer f1\n  frame a\n    go b if .x.y >= 2\n    go b if x.y < -1.5\n    go b if framer.me.x == 0x1\n"
    "    go b if frame.a.x == 1\n    go b if actor.a.x != 1\n    go b if me > 1\n    go b if goal <= 1.\n"
    "    go b if x of me >= 1\n    go b if value in .x >= 1\n    go b if .x >= .y\n    go b if .x >= yes\n"
    "    go b if .x\n    go b if not .x >= 1\n    go b if .x >= 1 and .y < 2\n    go b if .x is updated\n  frame b",
    "house h\nframer f1 be active first aé\n  frame aé\n    go b\u2028if elapsed >= 1.0\n  frame b\n    go aé",
    # errors: the general path must still report them, with the same positions
    "framer f1\n  frame a",
    "house h\n  frame a\n    go a",
    "house h\nframer f1\n    go a",
    "house h\nframer f1 be\n  frame a",
    "house h\nframer f1 be busy\n  frame a",
    "house h\nframer f1 first\n  frame a",
    "house h\nframer f1 at x\n  frame a",
    "house h\nframer f1 first 1a\n  frame a",
    "house h\nframer if\n  frame a",
    "house h\nframer f1\nframer f1\n  frame a",
    "house h\nframer f1\n  frame a\n  frame a",
    "house h\nframer f1\n  frame next\n  frame prev",
    "house h\nframer f1\n  frame a in\n  frame b on a",
    "house h\nframer f1\n  frame a\n    go\n    go 1b\n    go b if\n    go b if elapsed\n    go b if elapsed >= x",
    "house h\nframer f1\n  frame a\n    go b if elapsed >= 1.0 1\n    go b if elapsed >= >=\n    go c",
    "house h\nframer f1 first z\n  frame a in q\n    go nowhere if elapsed >= 1\n    go next",
    *(f"house h\nframer x be aux\n  frame a\nframer f1\n  frame a\n    {line}\n  frame b\n    go a" for line in [
        "timeout 1 2", "timeout", "timeout x", "timeout if", "repeat -", "timeout 1" + "0" * 400 + ".5",
        "repeat 1" + "0" * 400 + ".5", "repeat 1" + "0" * 400, "aux y", "aux 'x'", "aux x as y", "aux", "aux 2x",
        "aux x x", "do 'x'", "do x wiht a 1", "do 1x", "do x.1", "do", "do x-y", "do x at", "do é",
        "put", "put 1", "put 1 into", "put 1 onto .x", "put into .x", "put 1 into 'x'", "put 1 into in",
        "put 1X2Y into .x", "put 3j into .x", "put 1 into .x.", "put 1 into x-y", "put 1 into frame.x",
        "put 1 into actor.x", "put 1 into .x extra", "put 1-2 into .x", "inc .n with x", "inc .n with yes",
        "inc .n with none", "inc .n with 1X2Y", "inc .n with", "inc .n by 1", "inc 'n' with 1", "inc .n. with 1",
        "inc .n with 1 2", "inc with with 1", "inc .n with with",
        "native now", "enter me", "exit 'x'", "go b if elapsed >= 1.0.0", "go b if elapsed >= 1e", "go b if x >= 1",
        "go b if x-y >= 1", "go b if .x. >= 1", "go b if frame.x >= 1", "go b if if >= 1", "go b if 1 >= 1",
        "go b if .x >= 1 2", "go b if .x >= 1X2Y", "go b if .x = 1",
    ]),
    "house h\nprint x",
    "house h\nframer f1\n  timeout 1",
    "house h\nframer f1\n  aux x",
    "house h\nframer f1\n  do x",
    "house h\nframer f1\n  put 1 into .x",
    "house h\nframer f1\n  inc .x with 1",
    "house h\nframer f1 via\n  frame a",
    "house h\nframer f1 via 'x'\n  frame a",
    "house h\nframer f1 via x-y\n  frame a",
    "house h\nframer f1 via frame.x\n  frame a",
    "house h\nframer f1\n  frame a via\n",
    "house h\nframer f1\n  frame a via in\n",
    "house h\nframer f1\n  frame a via actor.x\n",
    "framer f1 \n  frame a",
    "house h\nframer z first z\n  frame a",  # the error must point at the second z
]


@pytest.mark.parametrize("text", SCRIPTS)
def test_fast_and_general_paths_agree(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    assert _outcome(text) == _general(monkeypatch, text)


def test_big_flow_agrees(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "house big\ninit .go with 0\n" + "\n".join(BODY.format(f=f"f{i}") for i in range(200))
    fast = _outcome(text)
    assert fast[0] == "ok"
    assert fast == _general(monkeypatch, text)


@pytest.mark.parametrize("text", SCRIPTS)
def test_lazy_statements_have_the_tokens_chunk_makes(text: str) -> None:
    """A plain statement's tokens, made on demand, are the ones :func:`chunk` makes."""
    lines = split_lines(text)
    for st in lex(text, "t.flo"):
        if st.words is None:
            continue
        words = list(st.words)
        wheres = [st.where(k) for k in range(len(words))]
        human = st.human
        tokens = st.tokens
        assert st.words is None  # materialised: no longer read as plain words
        expected, _ = chunk(lines[st.number - 1].rstrip(), "t.flo", st.number, lines[st.number - 1])
        assert [(t.text, t.line, t.col, t.source, t.quoted, t.reserved) for t in tokens] == \
            [(t.text, t.line, t.col, t.source, t.quoted, t.reserved) for t in expected]
        assert [t.text for t in tokens] == words
        assert [t.where for t in tokens] == wheres
        assert human == " ".join(words)


def test_plain_statement_repr_and_verb() -> None:
    st = lex("house h", "t.flo")[0]
    assert isinstance(st, Statement) and st.words == ["house", "h"]
    assert st.verb_text == "house"
    assert st.verb.text == "house" and st.verb.where.col == 1
    assert repr(st).startswith("Statement([Token('house', 1, 1)")


def test_long_invalid_path_fails_at_once() -> None:
    """Ioflo's path patterns backtracked exponentially on a long word that fails."""
    text = "house h\nframer f\n  frame a\n    put 1 into " + "a" * 60 + "-\n"
    with pytest.raises(FlowError, match="invalid share path"):
        parse_flo(text, "t.flo")
