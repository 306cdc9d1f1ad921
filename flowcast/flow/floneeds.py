"""Conditions (Ioflo's "needs"): the part of ``go``/``let``/``aux`` after ``if``.

Both front ends read conditions with this code -- a YAML flow writes them
as the same text (``if: elapsed >= 5 and .state.x is updated``) -- so a
condition means the same thing in either language.  It follows Ioflo's
``makeNeed`` and helpers: ``[not] STATE [OP GOAL [+- TOL]]``, framer
states ``elapsed``/``recurred`` (also as ``elapsed re me``), and the
``is`` forms (done, status, updated, changed).
"""

from __future__ import annotations

from typing import Any

from flowcast.flow import flowords as w
from flowcast.flow.errors import did_you_mean
from flowcast.flow.flolex import Token
from flowcast.flow.spec import Need, Ref

STATUSES: tuple[str, ...] = ("readied", "started", "running", "stopped", "aborted")
_PARTICIPLES = ("done",) + STATUSES + ("updated", "changed")


def needs(cur: w.Cursor, framer: str | None) -> list[Need]:
    """``NEED [and NEED ...]`` to the end of the statement."""
    if cur.at_end():
        raise cur.fail("'if' needs at least one condition")
    found = [need(cur, framer)]
    while not cur.at_end():
        conn = cur.take("'and'")
        if conn.text != "and":
            raise cur.fail(f"expected 'and' between conditions, found {conn.text!r}", conn,
                           hint=did_you_mean(conn.text, ["and"]))
        found.append(need(cur, framer))
    return found


def need(cur: w.Cursor, framer: str | None) -> Need:
    """One condition up to the next ``and`` (Ioflo's ``makeNeed``)."""
    start = cur.peek()
    negate = bool(cur.accept("not"))
    if cur.peek() is None:
        raise cur.fail("'not' needs a condition after it")
    is_at = _is_before_and(cur.tokens, cur.i)
    if is_at is not None:
        if is_at + 1 >= len(cur.tokens):
            raise cur.fail("'is' needs done, a status, updated or changed after it", cur.tokens[is_at])
        part = cur.tokens[is_at + 1]
        if part.text == "done":
            found = _done(cur, framer)
        elif part.text in STATUSES:
            found = _status(cur)
        elif part.text in ("updated", "changed"):
            found = _marker(cur)
        else:
            raise cur.fail(f"unknown condition 'is {part.text}'", part,
                           hint=did_you_mean(part.text, _PARTICIPLES)
                           or "expected done, readied, started, running, stopped, aborted, updated or changed")
    else:
        found = _state(cur, framer)
    return Need(**found, negate=negate, where=start.where if start else None)


def _is_before_and(tokens: list[Token], start: int) -> int | None:
    """Index of the first unquoted ``is`` from ``start`` up to the next ``and``."""
    for j in range(start, len(tokens)):
        tok = tokens[j]
        if not tok.quoted:
            if tok.text == "and":
                return None
            if tok.text == "is":
                return j
    return None


def _kw(kind: str, **fields: Any) -> dict[str, Any]:
    return {"kind": kind, **fields}


def _is(cur: w.Cursor, j: int, word: str) -> bool:
    tok = cur.tokens[j]
    return tok.text == word and not tok.quoted


def _state(cur: w.Cursor, framer: str | None) -> dict[str, Any]:
    tok = cur.peek()
    assert tok is not None
    after = cur.peek(1)
    if not tok.reserved and after is not None and _is(cur, cur.i + 1, "re"):
        # elapsed re [me|FRAMER] OP GOAL
        cur.i += 2
        if tok.text not in ("elapsed", "recurred"):
            raise cur.fail(f"unsupported framer state {tok.text!r}", tok, hint="framer states are elapsed and recurred")
        who = cur.peek()
        if who is not None and not who.reserved:
            cur.i += 1
            if who.text != "me" and who.text != framer:
                raise cur.fail(f"the framer state of another framer ({who.text!r}) is not supported", who,
                               hint="write 're me' or the current framer's name")
        return _framer(cur, tok.text)
    names = w.fields(cur, single=True)
    tok = cur.peek()
    if not names and tok is not None and tok.text in ("elapsed", "recurred") and not tok.quoted:
        cur.i += 1
        return _framer(cur, tok.text)
    state = Ref(w.indirect(cur, what="a share path, elapsed or recurred"), names)
    op = w.comparison(cur)
    if op is None:
        _end(cur)
        return _kw("boolean", state=state)
    goal_value, goal_ref = _goal(cur, None)
    tolerance = _tolerance(cur)
    _end(cur)
    return _kw("compare", state=state, op=op, goal_value=goal_value, goal_ref=goal_ref, tolerance=tolerance)


def _framer(cur: w.Cursor, kind: str) -> dict[str, Any]:
    tok = cur.take("a comparison (==, !=, <, <=, >=, >)")
    if tok.quoted or tok.text not in w.COMPARISONS:
        raise cur.fail(f"expected a comparison after {kind!r}, found {tok.text!r}", tok,
                       hint="comparisons: ==, !=, <, <=, >=, >")
    goal_value, goal_ref = _goal(cur, kind)
    tolerance = _tolerance(cur)
    _end(cur)
    return _kw(kind, op=tok.text, goal_value=goal_value, goal_ref=goal_ref, tolerance=tolerance)


def _goal(cur: w.Cursor, framer_state: str | None) -> tuple[Any, Ref | None]:
    tok = cur.take("a goal (a value or a share path)")
    if tok.reserved:
        raise cur.fail(f"expected a goal, found connective {tok.text!r}", tok)
    ok, value = w.goal_literal(tok)
    if ok:
        return value, None
    if framer_state is not None and tok.text == "goal":
        return None, Ref(f"framer.me.goal.{framer_state}")
    cur.i -= 1
    return None, w.ref(cur, single=True, what="a goal share path")


def _tolerance(cur: w.Cursor) -> float | None:
    if cur.accept("+-"):
        return w.real(cur.take("a tolerance"), "a tolerance")
    return None


def _end(cur: w.Cursor) -> None:
    tok = cur.peek()
    if tok is not None and not _is(cur, cur.i, "and"):
        raise cur.fail(f"unexpected {tok.text!r} in condition", tok,
                       hint=did_you_mean(tok.text, ["and", "+-"]) or "conditions are joined with 'and'")


def _optional_name(cur: w.Cursor, default: str) -> str:
    tok = cur.peek()
    if tok is None or tok.reserved:
        return default
    return cur.take_name("a name").text


def _done(cur: w.Cursor, framer: str | None) -> dict[str, Any]:
    """Ioflo's ``makeDoneNeed``: a tasker, or auxes (``any``/``all``/``aux NAME``
    with an optional ``in frame [F] [in framer [G]]`` place)."""
    tok = cur.take_word("a tasker name")
    aux = tasker = None
    if tok.text in ("any", "all") and not tok.quoted:
        aux = tok.text
    elif tok.text == "aux" and not tok.quoted:
        aux = cur.take_name("an aux framer name").text
    else:
        if tok.quoted or not w.IDENT.match(tok.text):
            raise cur.fail(f"invalid tasker name {tok.text!r}", tok)
        tasker = tok.text
    frame = in_framer = None
    conn = cur.take("'is done'")
    if conn.text == "in" and not conn.quoted:
        if tasker is not None:  # an 'in' place makes it an aux need
            aux, tasker = tasker, None
        in_framer = "me"
        if aux in ("any", "all"):
            frame = "me"
        place = cur.take("'frame' or 'framer'")
        if place.text == "framer":
            in_framer = _optional_name(cur, "me")
        elif place.text == "frame":
            frame = _optional_name(cur, "me")
            if cur.accept("in"):
                place = cur.take("'framer'")
                if place.text != "framer":
                    raise cur.fail(f"expected 'framer', found {place.text!r}", place)
                in_framer = _optional_name(cur, "me")
        else:
            raise cur.fail(f"expected 'frame' or 'framer', found {place.text!r}", place,
                           hint=did_you_mean(place.text, ["frame", "framer"]))
        if frame == "me" and in_framer not in ("me", framer):
            raise cur.fail(f"'in frame me' names this frame, which is not in framer {in_framer!r}", place)
        conn = cur.take("'is done'")
    if conn.text != "is":
        raise cur.fail(f"expected 'is done', found {conn.text!r}", conn)
    cur.take("'done'")
    _end(cur)
    return _kw("done", tasker=tasker, aux=aux, frame=frame, framer=in_framer)


def _status(cur: w.Cursor) -> dict[str, Any]:
    tok = cur.take_name("a tasker name")
    conn = cur.take("'is'")
    if conn.text != "is":
        raise cur.fail(f"expected 'is', found {conn.text!r}", conn)
    status = cur.take("a status")
    _end(cur)
    return _kw("status", tasker=tok.text, status=status.text)


def _marker(cur: w.Cursor) -> dict[str, Any]:
    """Ioflo's ``makeMarkerNeed``: ``PATH is (updated|changed) [in frame [F]] [by MARKER]``."""
    state = Ref(w.indirect(cur))
    conn = cur.take("'is'")
    if conn.text != "is":
        raise cur.fail(f"expected 'is', found {conn.text!r}", conn)
    part = cur.take("updated or changed")
    frame = marker = None
    while (tok := cur.peek()) is not None and not tok.quoted and tok.text in ("in", "by"):
        cur.i += 1
        if tok.text == "in":
            place = cur.take("'frame'")
            if place.text != "frame":
                raise cur.fail(f"expected 'frame', found {place.text!r}", place)
            frame = _optional_name(cur, "me")
        else:
            marker = cur.take_word("a marker name").value
    _end(cur)
    return _kw(part.text, state=state, frame=frame, marker=marker)
