"""The .flo reader of each verb of the table: a frame's act statements, word by word.

One ``read_VERB(parser, cursor)`` per verb of flow/verbs.py, found through
:data:`READERS`; floscript.py keeps the statements that give the flow its
shape (house, framer, frame, init, contexts) and the driver.  Each reader
checks its statement as Ioflo's ``Builder.build*`` would, fills the act's
arguments in the model's words and leaves the context to the parser (a
fixed verb passes its own).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from flowcast.flow import flowords as w
from flowcast.flow.errors import did_you_mean
from flowcast.flow.flolex import Token
from flowcast.flow.floneeds import needs as needs_
from flowcast.flow.spec import CONTEXTS, Aux, Need, Ref
from flowcast.flow.verbs import FIXED, NATIVE, make_act

if TYPE_CHECKING:
    from flowcast.flow.floscript import _Parser

__all__ = ["READERS"]

_CONTROLS = ("start", "run", "stop", "abort", "ready")


def read_do(p: _Parser, cur: w.Cursor) -> None:
    p.need_frame(cur)
    stops = ("as", "at", "via", "with", "from", "per", "for", "cum", "qua", "to")
    parts = _parts(p, cur, stops, "a behaviour name")
    args: dict[str, Any] = {"behaviour": parts, "with": {}, "per": {}, "from": [], "to": []}
    context = None
    while not cur.at_end():
        conn = cur.take("an option")
        key = conn.text
        if key == "as":
            args["name"] = _parts(p, cur, stops, "a name after 'as'")
        elif key == "at":
            ctx = cur.take_word("a context")
            if ctx.text not in CONTEXTS + ("native",):
                raise cur.fail(f"unknown context {ctx.text!r}", ctx,
                               hint=did_you_mean(ctx.text, CONTEXTS) or f"contexts: {', '.join(CONTEXTS)}")
            context = "recur" if ctx.text == "native" else ctx.text  # Ioflo: explicit native is recur
        elif key == "via":
            args["inode"] = w.indirect(cur, node=True, what="an inode path")
        elif key in ("with", "per"):
            data = w.direct(cur)
            args[key].update(data)
        elif key in ("from", "to"):
            args[key].append(w.ref(cur))
        elif key in ("for", "cum", "qua"):
            raise cur.fail(f"'do ... {key}' is not supported by flowcast", conn,
                           hint="use 'with', 'per', 'from' or 'to'")
        else:
            raise cur.fail(f"unexpected {key!r} in do statement", conn,
                           hint=did_you_mean(key, stops) or "options: as, at, via, with, from, per, to")
    p.add(cur, "do", args, context or p.context or NATIVE["do"])

def _parts(p: _Parser, cur: w.Cursor, stops: tuple[str, ...], what: str) -> str:
    parts: list[Token] = []
    while (tok := cur.peek()) is not None and not (not tok.quoted and tok.text in stops):
        if tok.quoted or tok.reserved or not w.IDENT.match(tok.text.replace(".", "_")):
            for part in parts:  # 'do thing wiht x 1': blame the misspelt connective
                typo = did_you_mean(part.text, stops)
                if typo:
                    raise cur.fail(f"unexpected {part.text!r} in {what}", part, hint=typo)
            raise cur.fail(f"invalid word {tok.text!r} in {what}", tok)
        parts.append(tok)
        cur.i += 1
    if not parts:
        raise cur.fail(f"'{cur.verb}' needs {what} here")
    return ".".join(p.text for p in parts)

def read_go(p: _Parser, cur: w.Cursor) -> None:
    p.need_frame(cur)
    far = cur.take_name("a target frame (a frame name, next or me)")
    needs = _if_needs(p, cur, optional=True)
    p.add(cur, "go", {"far": far.text, "needs": needs or [Need("always", where=far.where)],
                          "human": cur.statement.human}, FIXED["go"])

def read_let(p: _Parser, cur: w.Cursor) -> None:
    p.need_frame(cur)
    cur.accept("me")
    tok = cur.peek()
    if tok is None or tok.text != "if":
        raise cur.fail("expected 'if' and the entry conditions", tok)
    needs = _if_needs(p, cur, optional=False)
    p.add(cur, "let", {"needs": needs}, FIXED["let"])

def _if_needs(p: _Parser, cur: w.Cursor, optional: bool) -> list[Need]:
    if cur.at_end() and optional:
        return []
    conn = cur.take("'if'")
    if conn.text != "if":
        raise cur.fail(f"expected 'if', found {conn.text!r}", conn, hint=did_you_mean(conn.text, ["if"]))
    return needs_(cur, p.framer.name if p.framer else None)

def read_timeout(p: _Parser, cur: w.Cursor) -> None:
    p.need_frame(cur)
    tok = cur.take("a time in seconds")
    value = abs(w.real(tok, "a timeout"))
    cur.done()
    need = Need("elapsed", op=">=", goal_value=float(value), where=tok.where)
    p.add(cur, "go", {"far": "next", "needs": [need], "human": cur.statement.human}, FIXED["go"])

def read_repeat(p: _Parser, cur: w.Cursor) -> None:
    p.need_frame(cur)
    tok = cur.take("a count")
    value = abs(w.real(tok, "a repeat count"))
    cur.done()
    need = Need("recurred", op=">=", goal_value=int(value), where=tok.where)
    p.add(cur, "go", {"far": "next", "needs": [need], "human": cur.statement.human}, FIXED["go"])

def read_print(p: _Parser, cur: w.Cursor) -> None:
    # Ioflo prints the words as written, quotes and all.
    p.add(cur, "print", {"message": " ".join(t.text for t in cur.tokens[1:])})

def read_put(p: _Parser, cur: w.Cursor) -> None:
    p.need_frame(cur)
    data = w.direct(cur)
    _expect(p, cur, "into")
    dst = w.ref(cur)
    cur.done()
    p.add(cur, "put", {"data": data, "dst": dst})

def read_inc(p: _Parser, cur: w.Cursor) -> None:
    p.need_frame(cur)
    dst = w.ref(cur)
    conn = cur.take("'with DATA' or 'from SOURCE'")
    if conn.text == "with":
        start = cur.peek()
        data = w.direct(cur)
        for key, val in data.items():
            if isinstance(val, str) or val is None or isinstance(val, bool):
                raise cur.fail(f"'inc' needs numbers; {key} is {val!r}", start)
        p.add(cur, "inc", {"dst": dst, "data": data})
    elif conn.text == "from":
        p.add(cur, "inc", {"dst": dst, "src": w.ref(cur)})
    else:
        raise cur.fail(f"expected 'with' or 'from', found {conn.text!r}", conn,
                       hint=did_you_mean(conn.text, ["with", "from"]))
    cur.done()

def read_copy(p: _Parser, cur: w.Cursor) -> None:
    p.need_frame(cur)
    src = w.ref(cur)
    _expect(p, cur, "into")
    dst = w.ref(cur)
    cur.done()
    p.add(cur, "copy", {"src": src, "dst": dst})

def read_set(p: _Parser, cur: w.Cursor) -> None:
    p.need_frame(cur)
    tok = cur.peek()
    if tok is not None and tok.text in ("elapsed", "recurred"):
        cur.i += 1
        dst = Ref(f"framer.me.goal.{tok.text}")
        direct_words, indirect_words = ("with", "to"), ("from", "by")
    else:
        dst = w.ref(cur, what="a goal share")
        direct_words, indirect_words = ("with",), ("from",)
    conn = cur.take("'with DATA' or 'from SOURCE'")
    if conn.text in direct_words:
        p.add(cur, "set", {"dst": dst, "data": w.direct(cur)})
    elif conn.text in indirect_words:
        p.add(cur, "set", {"dst": dst, "src": w.ref(cur)})
    else:
        raise cur.fail(f"expected 'with' or 'from', found {conn.text!r}", conn,
                       hint=did_you_mean(conn.text, ["with", "from"]))
    cur.done()

def read_bid(p: _Parser, cur: w.Cursor) -> None:
    p.need_frame(cur)
    control = cur.take_word("a control (start, stop, run, abort or ready)")
    if control.text not in _CONTROLS:
        raise cur.fail(f"unknown bid control {control.text!r}", control,
                       hint=did_you_mean(control.text, _CONTROLS) or f"controls: {', '.join(_CONTROLS)}")
    taskers: list[str] = []
    while (tok := cur.peek()) is not None and tok.text != "at":
        taskers.append(cur.take_name("a tasker name").text)
    period: float | Ref | None = None
    if cur.accept("at"):
        tok = cur.take("a period (a number or a share)")
        try:
            period = max(0.0, float(w.number(tok.text))) if not tok.quoted else None
        except (ValueError, OverflowError):
            period = None
        if period is None:
            cur.i -= 1
            period = w.ref(cur, single=True, what="a period share")
    cur.done()
    p.add(cur, "bid", {"control": control.text, "taskers": taskers or ["me"], "period": period})

def read_fiat(p: _Parser, cur: w.Cursor) -> None:
    p.need_frame(cur)
    taskers = [cur.take_name("a tasker name").text]
    while not cur.at_end():
        taskers.append(cur.take_name("a tasker name").text)
    p.add(cur, cur.verb, {"taskers": taskers})

def read_done(p: _Parser, cur: w.Cursor) -> None:
    p.need_frame(cur)
    taskers: list[str] = []
    while not cur.at_end():
        taskers.append(cur.take_name("a tasker name").text)
    p.add(cur, "done", {"taskers": taskers or ["me"]})

def read_aux(p: _Parser, cur: w.Cursor) -> None:
    frame = p.need_frame(cur)
    name = cur.take_name("an aux framer name")
    needs: list[Need] = []
    if not cur.at_end():
        tok = cur.peek()
        if tok is not None and tok.text in ("as", "via"):
            raise cur.fail(f"cloned aux framers ('aux ... {tok.text}') are not supported by flowcast", tok)
        needs = _if_needs(p, cur, optional=False)
        # Conditional: an interrupter among the transitions, in script order.
        frame.acts.append(make_act("aux", FIXED["aux"], {"framer": name.text, "needs": needs}, name.where))
        return
    frame.auxes.append(Aux(name.text, (), name.where))

def _expect(p: _Parser, cur: w.Cursor, word: str) -> None:
    tok = cur.take(f"'{word}'")
    if tok.text != word:
        raise cur.fail(f"expected {word!r}, found {tok.text!r}", tok, hint=did_you_mean(tok.text, [word]))


#: By verb: its .flo reader.
READERS: dict[str, Callable[[_Parser, w.Cursor], None]] = {
    "do": read_do,
    "go": read_go,
    "let": read_let,
    "timeout": read_timeout,
    "repeat": read_repeat,
    "print": read_print,
    "put": read_put,
    "inc": read_inc,
    "copy": read_copy,
    "set": read_set,
    "bid": read_bid,
    **dict.fromkeys(("ready", "start", "stop", "run", "abort"), read_fiat),
    "done": read_done,
    "aux": read_aux,
}
