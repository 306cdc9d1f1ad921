"""The .flo parser's fast paths: the statements a big flow is made of, read without a cursor.

A 10,000-framer flow is almost all ``framer``, ``frame``, ``go ... if
elapsed >= N`` and context lines; building a token cursor for each costs
about half the parse (bench/scheduler.py's 10,000-framer flow parses in
0.29 s with these and 0.55 s without them, measured interleaved).  Each
fast path is tried first on a plain one-line statement and returns False,
having changed nothing, for anything it does not handle -- errors included
-- so the general handler (floscript.py, floacts.py) takes over and words
the error.  Acts are made by the verb table's :func:`make_act` with its
native contexts, as the general handlers make them.

Each must build exactly what its general handler builds -- the same model,
the same ``where`` positions, the same ``positions`` entries -- and
test_floscript_fastpath.py compares the two on tricky inputs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from flowcast.flow import flowords as w
from flowcast.flow.flolex import COMPARISONS, RESERVED, Statement
from flowcast.flow.spec import CONTEXTS, SCHEDULES, Aux, FramerSpec, FrameSpec, Need, Ref
from flowcast.flow.verbs import FIXED, NATIVE, VERBS, make_act

if TYPE_CHECKING:
    from flowcast.flow.floscript import _Parser

__all__ = ["FAST"]

#: Numbers the fast paths read: plain ASCII decimals, which :func:`flowords.number`
#: turns into an int or a float and nothing else claims first (not a coordinate,
#: a point, a boolean or a path).
_PLAIN_NUMBER = re.compile(r"[-+]?[0-9]+(\.[0-9]*)?\Z").match


_IDENT_MATCH = w.IDENT.match


def _is_name(word: str) -> bool:
    """What ``Cursor.take_name`` accepts, for a word that is not quoted."""
    return word not in RESERVED and _IDENT_MATCH(word) is not None


def _plain_real(word: str) -> float | None:
    """``flowords.real`` of a plain number, else None (the general path reports why)."""
    if _PLAIN_NUMBER(word) is None:
        return None
    try:
        return float(w.number(word))
    except OverflowError:  # an int too big for a float
        return None


def fast_framer(p: _Parser, st: Statement, words: list[str]) -> bool:
    """``framer NAME [be SCHEDULE | at PERIOD | first FRAME | via INODE] ...``."""
    house = p.house
    n = len(words)
    if house is None or n < 2 or not _is_name(words[1]) or n % 2:
        return False
    schedule, period, first, first_at, inode = "inactive", 0.0, None, 0, None
    for i in range(2, n, 2):
        key, val = words[i], words[i + 1]
        if key == "be" and val in SCHEDULES:
            schedule = val
        elif key == "first" and _is_name(val):
            first, first_at = val, i + 1
        elif key == "at" and (value := _plain_real(val)) is not None:
            period = max(0.0, value)
        elif key == "via" and (path := w.plain_indirect(val, node=True)) is not None:
            inode = path
        else:
            return False
    name = words[1]
    taken = p.framer_names.setdefault(id(house), set())
    if name in taken:
        return False
    framer = FramerSpec(name, schedule=schedule, period=period, inode=inode,  # type: ignore[arg-type]
                        where=st.where(1))
    if first is not None:
        framer.first = first
        p.positions[(id(framer), "first")] = partial(st.where, first_at)  # built only for an error
    taken.add(name)
    house.framers.append(framer)
    p.framer = framer
    p.frame = None
    p.context = None
    return True

def fast_frame(p: _Parser, st: Statement, words: list[str]) -> bool:
    """``frame NAME [in OVER | via INODE] ...``."""
    framer = p.framer
    n = len(words)
    if framer is None or n < 2 or n % 2:
        return False
    name = words[1]
    if not _is_name(name) or name in ("next", "prev"):
        return False
    over_at, inode = 0, None
    for i in range(2, n, 2):
        key, val = words[i], words[i + 1]
        if key == "in" and _is_name(val):
            over_at = i + 1
        elif key == "via" and (path := w.plain_indirect(val, node=True)) is not None:
            inode = path
        else:
            return False
    taken = p.frame_names.setdefault(id(framer), set())
    if name in taken:
        return False
    frame = FrameSpec(name, inode=inode, where=st.where(1))
    if over_at:
        frame.over = words[over_at]
        p.positions[(id(frame), "over")] = partial(st.where, over_at)  # built only for an error
    taken.add(name)
    framer.frames.append(frame)
    if framer.first is None:
        framer.first = name
    p.frame = frame
    p.context = None
    return True

def fast_go(p: _Parser, st: Statement, words: list[str]) -> bool:
    """``go FAR`` and ``go FAR if (elapsed|recurred|PATH) OP NUMBER``."""
    frame = p.frame
    n = len(words)
    if frame is None or n < 2 or not _is_name(words[1]):
        return False
    if n == 2:
        need = Need("always", where=st.where(1))
    elif n == 6 and words[2] == "if" and words[4] in COMPARISONS and _PLAIN_NUMBER(words[5]):
        state, op, goal = words[3], words[4], w.number(words[5])
        if state in ("elapsed", "recurred"):
            need = Need(state, op=op, goal_value=goal, goal_ref=None, tolerance=None, where=st.where(3))
        elif (path := w.plain_indirect(state)) is not None:
            need = Need("compare", state=Ref(path, ()), op=op, goal_value=goal, goal_ref=None, tolerance=None,
                        where=st.where(3))
        else:
            return False
    else:
        return False
    args = {"far": words[1], "needs": [need], "human": " ".join(words)}
    frame.acts.append(make_act("go", FIXED["go"], args, st.where(0)))
    return True

def fast_timeout(p: _Parser, st: Statement, words: list[str]) -> bool:
    """``timeout SECONDS`` / ``repeat COUNT``: a go to next when elapsed/recurred reach it."""
    if p.frame is None or len(words) != 2 or (value := _plain_real(words[1])) is None:
        return False
    value = abs(value)
    if not math.isfinite(value):
        return False
    if words[0] == "timeout":
        need = Need("elapsed", op=">=", goal_value=float(value), where=st.where(1))
    else:
        need = Need("recurred", op=">=", goal_value=int(value), where=st.where(1))
    args = {"far": "next", "needs": [need], "human": " ".join(words)}
    p.frame.acts.append(make_act("go", FIXED["go"], args, st.where(0)))
    return True

def fast_aux(p: _Parser, st: Statement, words: list[str]) -> bool:
    """``aux NAME`` without conditions."""
    if p.frame is None or len(words) != 2 or not _is_name(words[1]):
        return False
    p.frame.auxes.append(Aux(words[1], (), st.where(1)))
    return True

def fast_print(p: _Parser, st: Statement, words: list[str]) -> bool:
    """``print WORDS``: the words as written."""
    if p.frame is None:
        return False
    args = {"message": " ".join(words[1:])}
    p.frame.acts.append(make_act("print", p.context or NATIVE["print"], args, st.where(0)))
    return True

def fast_do(p: _Parser, st: Statement, words: list[str]) -> bool:
    """``do NAME [NAME ...]`` without options."""
    if p.frame is None or len(words) < 2:
        return False
    for word in words[1:]:  # every option word is a connective: none here
        if word in RESERVED or w.IDENT.match(word.replace(".", "_")) is None:
            return False
    args: dict[str, Any] = {"behaviour": ".".join(words[1:]), "with": {}, "per": {}, "from": [], "to": []}
    p.frame.acts.append(make_act("do", p.context or NATIVE["do"], args, st.where(0)))
    return True

def fast_put(p: _Parser, st: Statement, words: list[str]) -> bool:
    """``put VALUE into PATH``."""
    if p.frame is None or len(words) != 4 or words[2] != "into" or words[1] in RESERVED:
        return False
    ok, value = w.plain_value(words[1])
    path = w.plain_indirect(words[3])
    if not ok or path is None:
        return False
    args = {"data": {"value": value}, "dst": Ref(path, ())}
    p.frame.acts.append(make_act("put", p.context or NATIVE["put"], args, st.where(0)))
    return True

def fast_inc(p: _Parser, st: Statement, words: list[str]) -> bool:
    """``inc PATH with NUMBER``."""
    if p.frame is None or len(words) != 4 or words[2] != "with" or words[3] in RESERVED:
        return False
    path = w.plain_indirect(words[1])
    ok, value = w.plain_value(words[3])
    if path is None or not ok or not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    args = {"dst": Ref(path, ()), "data": {"value": value}}
    p.frame.acts.append(make_act("inc", p.context or NATIVE["inc"], args, st.where(0)))
    return True

def fast_context(p: _Parser, st: Statement, words: list[str]) -> bool:
    """A context line (``enter``, ``recur``, ...) or ``native``, alone."""
    if len(words) != 1:
        return False
    p.context = None if words[0] == "native" else words[0]
    return True


_ACTS: dict[str, Callable[[_Parser, Statement, list[str]], bool]] = {
    "go": fast_go,
    "timeout": fast_timeout,
    "repeat": fast_timeout,
    "aux": fast_aux,
    "print": fast_print,
    "do": fast_do,
    "put": fast_put,
    "inc": fast_inc,
}
assert set(_ACTS) <= set(VERBS), "a fast path for a verb the table does not know"

#: By statement word: the fast path to try before the general handler.
FAST: dict[str, Callable[[_Parser, Statement, list[str]], bool]] = {
    "framer": fast_framer,
    "frame": fast_frame,
    "native": fast_context,
    **dict.fromkeys(CONTEXTS, fast_context),
    **_ACTS,
}
