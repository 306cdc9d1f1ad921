"""FloScript (Ioflo 2.0.3's language) -> :class:`FlowSpec`.

The parser walks the statements :mod:`flolex` cuts, keeping Ioflo's
builder state (current house, framer, frame and context) and filling the
model the way Ioflo's ``Builder.build*`` methods fill its objects -- the
same defaults, the same native contexts, the same path normalisation --
so that the builder downstream can reproduce Ioflo's runs.  Names that can
only be checked once the whole script is read (a ``go`` to a frame written
later) are checked by :mod:`flonames` at the end, all problems at once.

Ioflo statements flowcast does not implement (servers, loggers, clones,
``rear``/``raze``, ...) fail here with a located "not supported" error
rather than being half-understood.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from flowcast.flow import flowords as w
from flowcast.flow.errors import FlowError, FlowErrors, did_you_mean, read_text
from flowcast.flow.flolex import COMPARISONS, RESERVED, Statement, Token, lex
from flowcast.flow.flonames import Positions, check_names
from flowcast.flow.floneeds import needs as needs_
from flowcast.runtime.gcpause import gc_paused
from flowcast.flow.spec import (
    CONTEXTS,
    SCHEDULES,
    Act,
    Aux,
    FlowSpec,
    FramerSpec,
    FrameSpec,
    HouseSpec,
    Init,
    Need,
    Ref,
    Where,
)

#: Ioflo verbs flowcast deliberately does not implement.
UNSUPPORTED: tuple[str, ...] = ("server", "logger", "loggee", "rear", "raze", "use", "flo", "give", "take")

#: Where each frame action runs when no context line precedes it (Ioflo's
#: "native" context of the verb).
NATIVE: dict[str, str] = {
    "do": "recur",
    "put": "enter", "inc": "enter", "copy": "enter", "set": "enter", "print": "enter",
    "bid": "enter", "done": "enter",
    "ready": "benter", "start": "enter", "stop": "exit", "run": "recur", "abort": "enter",
}

_FIAT_VERBS = ("ready", "start", "stop", "run", "abort")
_CONTROLS = ("start", "run", "stop", "abort", "ready")


def parse_flo(text: str, file: str = "<string>") -> FlowSpec:
    """Parse a FloScript text; raise :class:`FlowError` (or several) on any problem."""
    with gc_paused():  # the whole model is long-lived: collecting while building it is wasted work
        spec, errors = _parse(text, file)
    if errors:
        raise errors[0] if len(errors) == 1 else FlowErrors(errors)
    return spec


def _parse(text: str, file: str) -> tuple[FlowSpec, list[FlowError]]:
    """The model and its name problems.

    Kept apart from :func:`parse_flo` so that the statements, the parser
    and its name tables are all freed on return, before the collector
    runs again, instead of being scanned once more.
    """
    try:
        parser = _Parser(file)
        spec = parser.parse(lex(text, file))
    except RecursionError as exc:  # defensive: the parser does not recurse on input depth
        raise FlowError(f"flow script too deeply nested to read: {exc}") from None
    if not spec.houses:
        lines = text.splitlines()
        raise FlowError("flow defines no house", Where(file, 1, 1, lines[0] if lines else ""),
                        hint="start the script with 'house NAME'")
    return spec, check_names(spec, parser.positions)


def load_flo(path: str | Path) -> FlowSpec:
    """Read and parse a ``.flo`` file."""
    p = Path(path)
    try:
        text = read_text(p)
    except OSError as exc:
        raise FlowError(f"cannot read flow {p}: {exc.strerror or exc}") from None
    return parse_flo(text, str(p))


def make_act(verb: str, context: str, args: dict[str, Any], where: Where | None = None) -> Act:
    """An Act with every argument key present, so equal meaning means equal Acts.

    Both front ends build acts here: an argument the script did not give
    gets the same empty default whichever language it came from.
    """
    full = dict(args)
    if verb == "do":
        full.setdefault("name", None)
        full.setdefault("inode", None)
        for key in ("with", "per"):
            full.setdefault(key, {})
        for key in ("from", "to"):
            full.setdefault(key, [])
    elif verb == "bid":
        full.setdefault("period", None)
    elif verb in ("inc", "set"):
        full.setdefault("data", None)
        full.setdefault("src", None)
    elif verb == "go":
        full.setdefault("human", "")
    return Act(verb, context, full, where)  # type: ignore[arg-type]


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


class _Parser:
    def __init__(self, file: str) -> None:
        self.file = file
        self.spec = FlowSpec(source=file)
        self.house: HouseSpec | None = None
        self.framer: FramerSpec | None = None
        self.frame: FrameSpec | None = None
        self.context: str | None = None  # None: each verb's native context
        self.positions: Positions = {}  # where names were written, for errors found later
        self.framer_names: dict[int, set[str]] = {}  # per house, so big flows stay linear
        self.frame_names: dict[int, set[str]] = {}  # per framer

    # -- driver --------------------------------------------------------------

    def parse(self, statements: list[Statement]) -> FlowSpec:
        fast = self.fast
        for st in statements:
            words = st.words
            if words is not None:
                quick = fast.get(words[0])
                if quick is not None and quick(self, st, words):
                    continue
            cur = w.Cursor(st)
            verb = st.verb
            handler = self.verbs.get(verb.text) if not verb.quoted else None
            if handler is None:
                raise self._unknown_verb(verb)
            handler(self, cur)
        return self.spec

    def _unknown_verb(self, verb: Token) -> FlowError:
        supported = ", ".join(sorted(self.verbs))
        if verb.text in UNSUPPORTED:
            return FlowError(f"'{verb.text}' is an Ioflo statement not supported by flowcast", verb.where,
                             hint=f"supported statements: {supported}")
        if verb.reserved:
            return FlowError(f"connective {verb.text!r} cannot start a statement", verb.where,
                             hint="connectives continue the statement above; 'load' statements cannot be continued")
        hint = did_you_mean(verb.text, list(self.verbs) + list(UNSUPPORTED))
        hint = f"{hint} " if hint else ""
        return FlowError(f"unknown statement {verb.text!r}", verb.where, hint=f"{hint}supported statements: {supported}")

    def _need_house(self, cur: w.Cursor) -> HouseSpec:
        if self.house is None:
            raise FlowError(f"'{cur.verb}' before any house", cur.tokens[0].where,
                            hint="start the script with 'house NAME'")
        return self.house

    def _need_framer(self, cur: w.Cursor) -> FramerSpec:
        self._need_house(cur)
        if self.framer is None:
            raise FlowError(f"'{cur.verb}' outside a framer", cur.tokens[0].where,
                            hint="write 'framer NAME' first")
        return self.framer

    def _need_frame(self, cur: w.Cursor) -> FrameSpec:
        self._need_framer(cur)
        if self.frame is None:
            raise FlowError(f"'{cur.verb}' outside a frame", cur.tokens[0].where,
                            hint="write 'frame NAME' first")
        return self.frame

    def _add(self, cur: w.Cursor, verb: str, args: dict[str, Any], context: str | None = None) -> None:
        frame = self._need_frame(cur)
        ctx = context or self.context or NATIVE[verb]
        frame.acts.append(make_act(verb, ctx, args, cur.tokens[0].where))

    def _named(self, obj: object, attr: str, tok: Token) -> str:
        self.positions[(id(obj), attr)] = tok.where
        return tok.text

    # -- fast paths ------------------------------------------------------------
    #
    # Each must build exactly what its general handler builds -- the same
    # model, the same ``where`` positions, the same ``positions`` entries --
    # and test_floscript_fastpath.py compares the two on tricky inputs.

    def _fast_framer(self, st: Statement, words: list[str]) -> bool:
        """``framer NAME [be SCHEDULE | at PERIOD | first FRAME | via INODE] ...``."""
        house = self.house
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
        taken = self.framer_names.setdefault(id(house), set())
        if name in taken:
            return False
        framer = FramerSpec(name, schedule=schedule, period=period, inode=inode,  # type: ignore[arg-type]
                            where=st.where(1))
        if first is not None:
            framer.first = first
            self.positions[(id(framer), "first")] = partial(st.where, first_at)  # built only for an error
        taken.add(name)
        house.framers.append(framer)
        self.framer = framer
        self.frame = None
        self.context = None
        return True

    def _fast_frame(self, st: Statement, words: list[str]) -> bool:
        """``frame NAME [in OVER | via INODE] ...``."""
        framer = self.framer
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
        taken = self.frame_names.setdefault(id(framer), set())
        if name in taken:
            return False
        frame = FrameSpec(name, inode=inode, where=st.where(1))
        if over_at:
            frame.over = words[over_at]
            self.positions[(id(frame), "over")] = partial(st.where, over_at)  # built only for an error
        taken.add(name)
        framer.frames.append(frame)
        if framer.first is None:
            framer.first = name
        self.frame = frame
        self.context = None
        return True

    def _fast_go(self, st: Statement, words: list[str]) -> bool:
        """``go FAR`` and ``go FAR if (elapsed|recurred|PATH) OP NUMBER``."""
        frame = self.frame
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
        frame.acts.append(make_act("go", "precur", args, st.where(0)))
        return True

    def _fast_timeout(self, st: Statement, words: list[str]) -> bool:
        """``timeout SECONDS`` / ``repeat COUNT``: a go to next when elapsed/recurred reach it."""
        if self.frame is None or len(words) != 2 or (value := _plain_real(words[1])) is None:
            return False
        value = abs(value)
        if not math.isfinite(value):
            return False
        if words[0] == "timeout":
            need = Need("elapsed", op=">=", goal_value=float(value), where=st.where(1))
        else:
            need = Need("recurred", op=">=", goal_value=int(value), where=st.where(1))
        args = {"far": "next", "needs": [need], "human": " ".join(words)}
        self.frame.acts.append(make_act("go", "precur", args, st.where(0)))
        return True

    def _fast_aux(self, st: Statement, words: list[str]) -> bool:
        """``aux NAME`` without conditions."""
        if self.frame is None or len(words) != 2 or not _is_name(words[1]):
            return False
        self.frame.auxes.append(Aux(words[1], (), st.where(1)))
        return True

    def _fast_print(self, st: Statement, words: list[str]) -> bool:
        """``print WORDS``: the words as written."""
        if self.frame is None:
            return False
        args = {"message": " ".join(words[1:])}
        self.frame.acts.append(make_act("print", self.context or NATIVE["print"], args, st.where(0)))
        return True

    def _fast_do(self, st: Statement, words: list[str]) -> bool:
        """``do NAME [NAME ...]`` without options."""
        if self.frame is None or len(words) < 2:
            return False
        for word in words[1:]:  # every option word is a connective: none here
            if word in RESERVED or w.IDENT.match(word.replace(".", "_")) is None:
                return False
        args: dict[str, Any] = {"behaviour": ".".join(words[1:]), "with": {}, "per": {}, "from": [], "to": []}
        self.frame.acts.append(make_act("do", self.context or "recur", args, st.where(0)))
        return True

    def _fast_put(self, st: Statement, words: list[str]) -> bool:
        """``put VALUE into PATH``."""
        if self.frame is None or len(words) != 4 or words[2] != "into" or words[1] in RESERVED:
            return False
        ok, value = w.plain_value(words[1])
        path = w.plain_indirect(words[3])
        if not ok or path is None:
            return False
        args = {"data": {"value": value}, "dst": Ref(path, ())}
        self.frame.acts.append(make_act("put", self.context or NATIVE["put"], args, st.where(0)))
        return True

    def _fast_inc(self, st: Statement, words: list[str]) -> bool:
        """``inc PATH with NUMBER``."""
        if self.frame is None or len(words) != 4 or words[2] != "with" or words[3] in RESERVED:
            return False
        path = w.plain_indirect(words[1])
        ok, value = w.plain_value(words[3])
        if path is None or not ok or not isinstance(value, (int, float)) or isinstance(value, bool):
            return False
        args = {"dst": Ref(path, ()), "data": {"value": value}}
        self.frame.acts.append(make_act("inc", self.context or NATIVE["inc"], args, st.where(0)))
        return True

    def _fast_context(self, st: Statement, words: list[str]) -> bool:
        """A context line (``enter``, ``recur``, ...) or ``native``, alone."""
        if len(words) != 1:
            return False
        self.context = None if words[0] == "native" else words[0]
        return True

    # -- house level ---------------------------------------------------------

    def house_(self, cur: w.Cursor) -> None:
        name = cur.take_name("a house name")
        cur.done()
        if any(h.name == name.text for h in self.spec.houses):
            raise cur.fail(f"house {name.text!r} already defined", name)
        self.house = HouseSpec(name.text, where=name.where)
        self.spec.houses.append(self.house)
        self.framer = self.frame = None
        self.context = None

    def init(self, cur: w.Cursor) -> None:
        house = self._need_house(cur)
        start = cur.tokens[0].where
        dst_fields = w.fields(cur)
        dst = Ref(w.plain_path(cur), dst_fields)
        conn = cur.take("'with DATA' or 'from SOURCE'")
        if conn.text in ("with", "to"):
            if dst_fields:
                raise cur.fail("'init ... with' takes fields in its data, not before the path", cur.tokens[1])
            house.inits.append(Init(dst, data=w.direct(cur), where=start))
        elif conn.text == "from":
            src_fields = w.fields(cur)
            house.inits.append(Init(dst, src=Ref(w.plain_path(cur, "a source path"), src_fields), where=start))
        else:
            raise cur.fail(f"expected 'with' or 'from' after the path, found {conn.text!r}", conn,
                           hint=did_you_mean(conn.text, ["with", "from", "to"]))
        cur.done()

    def load(self, cur: w.Cursor) -> None:
        house = self._need_house(cur)
        tok = cur.take_word("a behaviour module (a path such as behaviors/counter.py or a dotted module)")
        cur.done()
        if tok.value.endswith(".flo"):
            raise cur.fail("loading other .flo files is not supported by flowcast; 'load' loads behaviour modules", tok)
        house.loads.append(tok.value)
        house.load_where.setdefault(tok.value, tok.where)

    def log(self, cur: w.Cursor) -> None:
        house = self._need_house(cur)
        if cur.at_end():
            raise cur.fail("'log' needs at least one share path")
        while not cur.at_end():
            tok = cur.peek()
            path = w.plain_path(cur)
            r = Ref(path)
            if r in house.logs:
                raise cur.fail(f"share {path!r} is already logged", tok)
            house.logs.append(r)

    # -- framers and frames --------------------------------------------------

    def framer_(self, cur: w.Cursor) -> None:
        house = self._need_house(cur)
        name = cur.take_name("a framer name")
        framer = FramerSpec(name.text, schedule="inactive", where=name.where)  # Ioflo's default
        while not cur.at_end():
            conn = cur.take("an option")
            if conn.text == "be":
                opt = cur.take_word("a schedule")
                if opt.text not in SCHEDULES:
                    raise cur.fail(f"unknown schedule {opt.text!r}", opt,
                                   hint=did_you_mean(opt.text, SCHEDULES) or f"schedules: {', '.join(SCHEDULES)}")
                framer.schedule = opt.text  # type: ignore[assignment]
            elif conn.text == "at":
                framer.period = max(0.0, w.real(cur.take("a period"), "a period"))
            elif conn.text == "first":
                framer.first = self._named(framer, "first", cur.take_name("a frame name"))
            elif conn.text == "via":
                framer.inode = w.indirect(cur, node=True, what="an inode path")
            elif conn.text == "in":
                raise cur.fail("framer ordering ('in front/mid/back') is not supported by flowcast", conn)
            else:
                raise cur.fail(f"unexpected {conn.text!r} in framer statement", conn,
                               hint=did_you_mean(conn.text, ["be", "at", "first", "via"]) or
                               "options: be SCHEDULE, at PERIOD, first FRAME, via INODE")
        taken = self.framer_names.setdefault(id(house), set())
        if name.text in taken:
            raise cur.fail(f"framer {name.text!r} already defined in house {house.name!r}", name)
        taken.add(name.text)
        house.framers.append(framer)
        self.framer = framer
        self.frame = None
        self.context = None

    def first(self, cur: w.Cursor) -> None:
        framer = self._need_framer(cur)
        framer.first = self._named(framer, "first", cur.take_name("a frame name"))
        cur.done()

    def frame_(self, cur: w.Cursor) -> None:
        framer = self._need_framer(cur)
        name = cur.take_name("a frame name")
        if name.text in ("next", "prev"):
            raise cur.fail(f"{name.text!r} is reserved and cannot name a frame", name)
        frame = FrameSpec(name.text, where=name.where)
        while not cur.at_end():
            conn = cur.take("an option")
            if conn.text == "in":
                frame.over = self._named(frame, "over", cur.take_name("the over frame's name"))
            elif conn.text == "via":
                frame.inode = w.indirect(cur, node=True, what="an inode path")
            else:
                raise cur.fail(f"unexpected {conn.text!r} in frame statement", conn,
                               hint=did_you_mean(conn.text, ["in", "via"]) or "options: in OVER, via INODE")
        taken = self.frame_names.setdefault(id(framer), set())
        if name.text in taken:
            raise cur.fail(f"frame {name.text!r} already defined in framer {framer.name!r}", name)
        taken.add(name.text)
        framer.frames.append(frame)
        if framer.first is None:
            framer.first = frame.name
        self.frame = frame
        self.context = None

    def over(self, cur: w.Cursor) -> None:
        frame = self._need_frame(cur)
        frame.over = self._named(frame, "over", cur.take_name("a frame name"))
        cur.done()

    def under(self, cur: w.Cursor) -> None:
        frame = self._need_frame(cur)
        frame.under = self._named(frame, "under", cur.take_name("a frame name"))
        cur.done()

    def next_(self, cur: w.Cursor) -> None:
        frame = self._need_frame(cur)
        frame.next = self._named(frame, "next", cur.take_name("a frame name")) if not cur.at_end() else None
        cur.done()

    # Context lines need no frame (Ioflo accepts them anywhere); the next
    # 'frame' resets the context anyway.

    def native(self, cur: w.Cursor) -> None:
        cur.done()
        self.context = None

    def context_line(self, cur: w.Cursor) -> None:
        cur.done()
        self.context = cur.verb

    # -- actions ---------------------------------------------------------------

    def do(self, cur: w.Cursor) -> None:
        self._need_frame(cur)
        stops = ("as", "at", "via", "with", "from", "per", "for", "cum", "qua", "to")
        parts = self._parts(cur, stops, "a behaviour name")
        args: dict[str, Any] = {"behaviour": parts, "with": {}, "per": {}, "from": [], "to": []}
        context = None
        while not cur.at_end():
            conn = cur.take("an option")
            key = conn.text
            if key == "as":
                args["name"] = self._parts(cur, stops, "a name after 'as'")
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
        self._add(cur, "do", args, context or self.context or "recur")

    def _parts(self, cur: w.Cursor, stops: tuple[str, ...], what: str) -> str:
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

    def go(self, cur: w.Cursor) -> None:
        self._need_frame(cur)
        far = cur.take_name("a target frame (a frame name, next or me)")
        needs = self._if_needs(cur, optional=True)
        self._add(cur, "go", {"far": far.text, "needs": needs or [Need("always", where=far.where)],
                              "human": cur.statement.human}, "precur")

    def let(self, cur: w.Cursor) -> None:
        self._need_frame(cur)
        cur.accept("me")
        tok = cur.peek()
        if tok is None or tok.text != "if":
            raise cur.fail("expected 'if' and the entry conditions", tok)
        needs = self._if_needs(cur, optional=False)
        self._add(cur, "let", {"needs": needs}, "benter")

    def _if_needs(self, cur: w.Cursor, optional: bool) -> list[Need]:
        if cur.at_end() and optional:
            return []
        conn = cur.take("'if'")
        if conn.text != "if":
            raise cur.fail(f"expected 'if', found {conn.text!r}", conn, hint=did_you_mean(conn.text, ["if"]))
        return needs_(cur, self.framer.name if self.framer else None)

    def timeout(self, cur: w.Cursor) -> None:
        self._need_frame(cur)
        tok = cur.take("a time in seconds")
        value = abs(w.real(tok, "a timeout"))
        cur.done()
        need = Need("elapsed", op=">=", goal_value=float(value), where=tok.where)
        self._add(cur, "go", {"far": "next", "needs": [need], "human": cur.statement.human}, "precur")

    def repeat(self, cur: w.Cursor) -> None:
        self._need_frame(cur)
        tok = cur.take("a count")
        value = abs(w.real(tok, "a repeat count"))
        cur.done()
        need = Need("recurred", op=">=", goal_value=int(value), where=tok.where)
        self._add(cur, "go", {"far": "next", "needs": [need], "human": cur.statement.human}, "precur")

    def print_(self, cur: w.Cursor) -> None:
        # Ioflo prints the words as written, quotes and all.
        self._add(cur, "print", {"message": " ".join(t.text for t in cur.tokens[1:])})

    def put(self, cur: w.Cursor) -> None:
        self._need_frame(cur)
        data = w.direct(cur)
        self._expect(cur, "into")
        dst = w.ref(cur)
        cur.done()
        self._add(cur, "put", {"data": data, "dst": dst})

    def inc(self, cur: w.Cursor) -> None:
        self._need_frame(cur)
        dst = w.ref(cur)
        conn = cur.take("'with DATA' or 'from SOURCE'")
        if conn.text == "with":
            start = cur.peek()
            data = w.direct(cur)
            for key, val in data.items():
                if isinstance(val, str) or val is None or isinstance(val, bool):
                    raise cur.fail(f"'inc' needs numbers; {key} is {val!r}", start)
            self._add(cur, "inc", {"dst": dst, "data": data})
        elif conn.text == "from":
            self._add(cur, "inc", {"dst": dst, "src": w.ref(cur)})
        else:
            raise cur.fail(f"expected 'with' or 'from', found {conn.text!r}", conn,
                           hint=did_you_mean(conn.text, ["with", "from"]))
        cur.done()

    def copy(self, cur: w.Cursor) -> None:
        self._need_frame(cur)
        src = w.ref(cur)
        self._expect(cur, "into")
        dst = w.ref(cur)
        cur.done()
        self._add(cur, "copy", {"src": src, "dst": dst})

    def set_(self, cur: w.Cursor) -> None:
        self._need_frame(cur)
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
            self._add(cur, "set", {"dst": dst, "data": w.direct(cur)})
        elif conn.text in indirect_words:
            self._add(cur, "set", {"dst": dst, "src": w.ref(cur)})
        else:
            raise cur.fail(f"expected 'with' or 'from', found {conn.text!r}", conn,
                           hint=did_you_mean(conn.text, ["with", "from"]))
        cur.done()

    def bid(self, cur: w.Cursor) -> None:
        self._need_frame(cur)
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
        self._add(cur, "bid", {"control": control.text, "taskers": taskers or ["me"], "period": period})

    def fiat(self, cur: w.Cursor) -> None:
        self._need_frame(cur)
        taskers = [cur.take_name("a tasker name").text]
        while not cur.at_end():
            taskers.append(cur.take_name("a tasker name").text)
        self._add(cur, cur.verb, {"taskers": taskers})

    def done(self, cur: w.Cursor) -> None:
        self._need_frame(cur)
        taskers: list[str] = []
        while not cur.at_end():
            taskers.append(cur.take_name("a tasker name").text)
        self._add(cur, "done", {"taskers": taskers or ["me"]})

    def aux(self, cur: w.Cursor) -> None:
        frame = self._need_frame(cur)
        name = cur.take_name("an aux framer name")
        needs: list[Need] = []
        if not cur.at_end():
            tok = cur.peek()
            if tok is not None and tok.text in ("as", "via"):
                raise cur.fail(f"cloned aux framers ('aux ... {tok.text}') are not supported by flowcast", tok)
            needs = self._if_needs(cur, optional=False)
            # Conditional: an interrupter among the transitions, in script order.
            frame.acts.append(make_act("aux", "precur", {"framer": name.text, "needs": needs}, name.where))
            return
        frame.auxes.append(Aux(name.text, (), name.where))

    def _expect(self, cur: w.Cursor, word: str) -> None:
        tok = cur.take(f"'{word}'")
        if tok.text != word:
            raise cur.fail(f"expected {word!r}, found {tok.text!r}", tok, hint=did_you_mean(tok.text, [word]))


    # -- verb tables -----------------------------------------------------------
    # Plain functions, called with the parser: bound methods kept on the
    # parser would make a reference cycle, and the parser with its name
    # tables would then wait for the collector instead of dying at once.

    #: The general handler of each verb.
    verbs: dict[str, Callable[[_Parser, w.Cursor], None]] = {
        "house": house_,
        "init": init,
        "load": load,
        "log": log,
        "framer": framer_,
        "first": first,
        "frame": frame_,
        "over": over,
        "under": under,
        "next": next_,
        "native": native,
        **dict.fromkeys(CONTEXTS, context_line),
        "do": do,
        "go": go,
        "let": let,
        "timeout": timeout,
        "repeat": repeat,
        "print": print_,
        "put": put,
        "inc": inc,
        "copy": copy,
        "set": set_,
        "bid": bid,
        **dict.fromkeys(_FIAT_VERBS, fiat),
        "done": done,
        "aux": aux,
    }

    #: Fast paths for the statements a big flow is made of, tried first on
    #: plain one-line statements; each returns False, having changed
    #: nothing, for anything it does not handle -- errors included --
    #: and the general handler takes over.
    fast: dict[str, Callable[[_Parser, Statement, list[str]], bool]] = {
        "framer": _fast_framer,
        "frame": _fast_frame,
        "go": _fast_go,
        "timeout": _fast_timeout,
        "repeat": _fast_timeout,
        "aux": _fast_aux,
        "print": _fast_print,
        "do": _fast_do,
        "put": _fast_put,
        "inc": _fast_inc,
        "native": _fast_context,
        **dict.fromkeys(CONTEXTS, _fast_context),
    }
