"""FloScript (Ioflo 2.0.3's language) -> :class:`FlowSpec`.

The parser walks the statements :mod:`flolex` cuts, keeping Ioflo's
builder state (current house, framer, frame and context) and filling the
model the way Ioflo's ``Builder.build*`` methods fill its objects -- the
same defaults, the same native contexts, the same path normalisation --
so that the builder downstream can reproduce Ioflo's runs.  Names that can
only be checked once the whole script is read (a ``go`` to a frame written
later) are checked by :mod:`flonames` at the end, all problems at once.

This module holds the driver and the statements that give a flow its
shape (house, init, load, log, framer, frame, contexts); each act verb's
reader is in :mod:`floacts`, found through the verb table
(:mod:`verbs`), and the fast paths for the statements big flows are made
of are in :mod:`flofast`.

Ioflo statements flowcast does not implement (servers, loggers, clones,
``rear``/``raze``, ...) fail here with a located "not supported" error
rather than being half-understood.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from flowcast.flow import flowords as w
from flowcast.flow.errors import FlowError, FlowErrors, did_you_mean, read_text
from flowcast.flow.floacts import READERS
from flowcast.flow.flofast import FAST
from flowcast.flow.flolex import Statement, Token, lex
from flowcast.flow.flonames import Positions, check_names
from flowcast.flow.spec import CONTEXTS, SCHEDULES, FlowSpec, FramerSpec, FrameSpec, HouseSpec, Init, Ref, Where
from flowcast.flow.verbs import NATIVE, each, make_act
from flowcast.runtime.gcpause import gc_paused

__all__ = ["NATIVE", "UNSUPPORTED", "load_flo", "make_act", "parse_flo"]

#: Ioflo verbs flowcast deliberately does not implement.
UNSUPPORTED: tuple[str, ...] = ("server", "logger", "loggee", "rear", "raze", "use", "flo", "give", "take")


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

    def need_house(self, cur: w.Cursor) -> HouseSpec:
        if self.house is None:
            raise FlowError(f"'{cur.verb}' before any house", cur.tokens[0].where,
                            hint="start the script with 'house NAME'")
        return self.house

    def need_framer(self, cur: w.Cursor) -> FramerSpec:
        self.need_house(cur)
        if self.framer is None:
            raise FlowError(f"'{cur.verb}' outside a framer", cur.tokens[0].where,
                            hint="write 'framer NAME' first")
        return self.framer

    def need_frame(self, cur: w.Cursor) -> FrameSpec:
        self.need_framer(cur)
        if self.frame is None:
            raise FlowError(f"'{cur.verb}' outside a frame", cur.tokens[0].where,
                            hint="write 'frame NAME' first")
        return self.frame

    def add(self, cur: w.Cursor, verb: str, args: dict[str, Any], context: str | None = None) -> None:
        frame = self.need_frame(cur)
        ctx = context or self.context or NATIVE[verb]
        frame.acts.append(make_act(verb, ctx, args, cur.tokens[0].where))

    def named(self, obj: object, attr: str, tok: Token) -> str:
        self.positions[(id(obj), attr)] = tok.where
        return tok.text

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
        house = self.need_house(cur)
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
        house = self.need_house(cur)
        tok = cur.take_word("a behaviour module (a path such as behaviors/counter.py or a dotted module)")
        cur.done()
        if tok.value.endswith(".flo"):
            raise cur.fail("loading other .flo files is not supported by flowcast; 'load' loads behaviour modules", tok)
        house.loads.append(tok.value)
        house.load_where.setdefault(tok.value, tok.where)

    def log(self, cur: w.Cursor) -> None:
        house = self.need_house(cur)
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
        house = self.need_house(cur)
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
                framer.first = self.named(framer, "first", cur.take_name("a frame name"))
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
        framer = self.need_framer(cur)
        framer.first = self.named(framer, "first", cur.take_name("a frame name"))
        cur.done()

    def frame_(self, cur: w.Cursor) -> None:
        framer = self.need_framer(cur)
        name = cur.take_name("a frame name")
        if name.text in ("next", "prev"):
            raise cur.fail(f"{name.text!r} is reserved and cannot name a frame", name)
        frame = FrameSpec(name.text, where=name.where)
        while not cur.at_end():
            conn = cur.take("an option")
            if conn.text == "in":
                frame.over = self.named(frame, "over", cur.take_name("the over frame's name"))
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
        frame = self.need_frame(cur)
        frame.over = self.named(frame, "over", cur.take_name("a frame name"))
        cur.done()

    def under(self, cur: w.Cursor) -> None:
        frame = self.need_frame(cur)
        frame.under = self.named(frame, "under", cur.take_name("a frame name"))
        cur.done()

    def next_(self, cur: w.Cursor) -> None:
        frame = self.need_frame(cur)
        frame.next = self.named(frame, "next", cur.take_name("a frame name")) if not cur.at_end() else None
        cur.done()

    # Context lines need no frame (Ioflo accepts them anywhere); the next
    # 'frame' resets the context anyway.

    def native(self, cur: w.Cursor) -> None:
        cur.done()
        self.context = None

    def context_line(self, cur: w.Cursor) -> None:
        cur.done()
        self.context = cur.verb

    # -- the statement table ---------------------------------------------------
    # Plain functions, called with the parser: bound methods kept on the
    # parser would make a reference cycle, and the parser with its name
    # tables would then wait for the collector instead of dying at once.

    #: The general handler of each statement: the flow's shape here, each act
    #: verb's reader from floacts.py through the verb table.
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
        **each(READERS, "the .flo reader (floacts.py)"),
    }

    #: Fast paths (flofast.py) for the statements a big flow is made of.
    fast: dict[str, Callable[[_Parser, Statement, list[str]], bool]] = dict(FAST)
