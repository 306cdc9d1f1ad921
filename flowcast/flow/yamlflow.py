"""YAML flows: the same model as FloScript, in a schema people can read.

A flow is a mapping with ``house:`` (one house) or ``houses:`` (a list of
them); see docs/flows.md for the schema.  Share references and conditions
are written in FloScript's own words (``value in .state.depth``,
``elapsed >= goal and .ready``) and read by the FloScript code, so they
mean exactly the same in both languages; everything else is plain YAML.

Errors point into the YAML file: the document is composed into a node tree
first, so every value keeps its line and column, and a condition's tokens
are placed inside their scalar.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from flowcast.runtime.gcpause import gc_paused
from flowcast.flow import flowords as w
from flowcast.flow.errors import FlowError, FlowErrors, did_you_mean, read_text
from flowcast.flow.floneeds import needs as parse_needs
from flowcast.flow.flolex import Statement, Token, chunk
from flowcast.flow.flonames import check_names
from flowcast.flow.verbs import FIXED, NATIVE, VERBS, each, make_act
from flowcast.flow.yamlnodes import BOOL, NodeReader, Pairs, node_kind, show
from flowcast.flow.yamlwrite import dump_yaml, go_human
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

#: Keys an act may have besides its verb, per verb (from the verb table).
ACT_KEYS: dict[str, tuple[str, ...]] = {word: verb.yaml for word, verb in VERBS.items()}


__all__ = ["ACT_KEYS", "dump_yaml", "load_yaml", "parse_yaml"]


def load_yaml(path: str | Path) -> FlowSpec:
    p = Path(path)
    try:
        text = read_text(p)
    except OSError as exc:
        raise FlowError(f"cannot read flow {p}: {exc.strerror or exc}") from None
    return parse_yaml(text, str(p))


def parse_yaml(text: str, file: str = "<string>") -> FlowSpec:
    """Parse a YAML flow; raise :class:`FlowError` (or several) on any problem."""
    with gc_paused():
        spec = _Reader(text, file).flow()
    errors = check_names(spec)
    if errors:
        raise errors[0] if len(errors) == 1 else FlowErrors(errors)
    return spec


# -- reading ------------------------------------------------------------------


class _Reader(NodeReader):
    """A YAML flow's nodes into the model; stops at the first error."""

    kind = "flow"

    def __init__(self, text: str, file: str) -> None:
        super().__init__(text, file)
        self.framer: FramerSpec | None = None

    # node helpers: each raises at a problem (the reader does not collect)

    def value(self, node: yaml.Node, what: str) -> Any:
        """A scalar's Python value (int, float, bool, None or str).

        YAML 1.1 reads a bare ``on``, ``off``, ``yes``, ``no`` (any case) as
        a boolean: ``put: on`` would put True where the author meant the text
        "on", and a flow comparing with "on" would never match -- silently.
        Refused with the fix; ``true`` and ``false`` stay booleans.
        """
        if isinstance(node, yaml.ScalarNode) and node.tag == BOOL and node.value.lower() not in ("true", "false"):
            raise self.error(f"{what} {show(node.value)} reads as a YAML boolean", node,
                             f"write \"{node.value}\" in quotes for the text, or true or false for a boolean")
        return self.scalar(node, what)

    def mapping(self, node: yaml.Node, what: str, allowed: tuple[str, ...],  # type: ignore[override]
                required: tuple[str, ...] = ()) -> Pairs:
        pairs = super().mapping(node, what, allowed, required)
        assert pairs is not None  # not collecting: a problem raised
        return pairs

    def items(self, node: yaml.Node, what: str) -> list[yaml.Node]:  # type: ignore[override]
        found = super().items(node, what)
        assert found is not None
        return found

    def text_of(self, node: yaml.Node, what: str) -> str:
        if not isinstance(node, yaml.ScalarNode):
            raise self.error(f"{what} must be text, not a {node_kind(node)}", node)
        return str(node.value)

    def name(self, node: yaml.Node, what: str) -> str:
        text = self.text_of(node, what)
        if not w.IDENT.match(text) or text in w.RESERVED:
            raise self.error(f"invalid {what} {text!r}: expected a name like 'idle' or 'leg2'", node)
        return text

    def cursor(self, node: yaml.Node, verb: str, what: str) -> w.Cursor:
        """FloScript tokens of a scalar, placed where they are in the file."""
        text = self.text_of(node, what)
        where = self.where(node)
        mark, end = node.start_mark, node.end_mark
        style = getattr(node, "style", None)
        offset = where.col - 1 + (1 if style in ("'", '"') else 0)
        raw = where.text[offset:offset + len(text)]
        exact = mark.line == end.line and raw == text and "\n" not in text
        flat = text.replace("\r", " ").replace("\n", " ")
        tokens, _ = chunk(flat, self.file, where.line, where.text, offset if exact else where.col - 1, exact)
        if not tokens:
            raise self.error(f"{what} is empty", node)
        verb_tok = Token(verb, where.line, where.col, where.text, self.file)
        return w.Cursor(Statement([verb_tok, *tokens]))

    def ref(self, node: yaml.Node, what: str = "a share reference", inode: bool = False) -> Ref:
        cur = self.cursor(node, what, what)
        r = Ref(w.indirect(cur, node=True), ()) if inode else w.ref(cur, what=what)
        cur.done()
        return r

    def inode(self, node: yaml.Node) -> str:
        return self.ref(node, "an inode path", inode=True).path

    def refs(self, node: yaml.Node, what: str) -> list[Ref]:
        return [self.ref(n, what) for n in self.list_or_one(node)]

    def data(self, node: yaml.Node, what: str) -> dict[str, Any]:
        """``{field: value, ...}`` or a lone value meaning field ``value``."""
        if isinstance(node, yaml.ScalarNode):
            return {"value": self.value(node, what)}
        if not isinstance(node, yaml.MappingNode):
            raise self.error(f"{what} must be a value or a mapping of fields, not a {node_kind(node)}", node)
        self.count_alias(node)
        data: dict[str, Any] = {}
        for key_node, val_node in node.value:
            key = self.text_of(key_node, "a field name")
            if not w.IDENT.match(key):
                raise self.error(f"invalid field name {key!r}", key_node)
            if key in data:
                raise self.error(f"field {key!r} given twice", key_node)
            data[key] = self.value(val_node, f"field {key!r}")
        if not data:
            raise self.error(f"{what} has no fields", node)
        if len(data) > 1 and "value" in data:
            raise self.error("field 'value' must be the only field when given", node,
                             "as in Ioflo, where 'value' is the field a share is read by when none is named; "
                             "give the others in a second init of the same share")
        return data

    def conditions(self, node: yaml.Node) -> list[Need]:
        found: list[Need] = []
        for item in self.list_or_one(node):
            cur = self.cursor(item, "if", "a condition")
            found.extend(parse_needs(cur, self.framer.name if self.framer else None))
        return found

    # structure

    def flow(self) -> FlowSpec:
        root = self.compose()
        spec = FlowSpec(source=self.file)
        if root is None:
            raise FlowError("empty YAML flow: expected 'house: NAME' or 'houses: [...]'",
                            Where(self.file, 1, 1, self.lines[0] if self.lines else ""))
        if isinstance(root, yaml.MappingNode) and any(
                isinstance(k, yaml.ScalarNode) and k.value == "houses" for k, _ in root.value):
            top = self.mapping(root, "the flow", ("houses",))
            for item in self.items(top["houses"][1], "houses"):
                spec.houses.append(self.house(item))
        else:
            spec.houses.append(self.house(root))
        names = [h.name for h in spec.houses]
        for i, house in enumerate(spec.houses):
            if house.name in names[:i]:
                raise FlowError(f"house {house.name!r} defined twice", house.where)
        return spec

    def house(self, node: yaml.Node) -> HouseSpec:
        m = self.mapping(node, "a house", ("house", "load", "log", "init", "framers"))
        if "house" not in m:
            raise self.error("a house needs 'house: NAME'", node)
        house = HouseSpec(self.name(m["house"][1], "house name"), where=self.where(m["house"][1]))
        if "load" in m:
            for n in self.list_or_one(m["load"][1]):
                module = self.text_of(n, "a behaviour module")
                house.loads.append(module)
                house.load_where.setdefault(module, self.where(n))
        if "log" in m:
            for n in self.list_or_one(m["log"][1]):
                r = self.ref(n, "a logged share")
                if r in house.logs:
                    raise self.error(f"share {r.path!r} is already logged", n)
                house.logs.append(r)
        if "init" in m:
            house.inits = [self.init(n) for n in self.items(m["init"][1], "init")]
        if "framers" in m:
            for item in self.items(m["framers"][1], "framers"):
                house.framers.append(self.framer_(item))
        return house

    def init(self, node: yaml.Node) -> Init:
        m = self.mapping(node, "an init", ("init", "with", "from"))
        if "init" not in m or ("with" in m) == ("from" in m):
            raise self.error("an init needs 'init: PATH' and one of 'with: DATA' or 'from: SOURCE'", node)
        dst = self.plain(m["init"][1])
        if "with" in m:
            if dst.fields:
                raise self.error("'init ... with' takes fields in its data, not before the path", m["init"][1])
            return Init(dst, data=self.data(m["with"][1], "init data"), where=self.where(node))
        return Init(dst, src=self.plain(m["from"][1]), where=self.where(node))

    def plain(self, node: yaml.Node) -> Ref:
        cur = self.cursor(node, "init", "a share path")
        names = w.fields(cur)
        r = Ref(w.plain_path(cur), names)
        cur.done()
        return r

    def framer_(self, node: yaml.Node) -> FramerSpec:
        m = self.mapping(node, "a framer", ("framer", "be", "at", "first", "via", "frames"))
        if "framer" not in m:
            raise self.error("a framer needs 'framer: NAME'", node)
        framer = FramerSpec(self.name(m["framer"][1], "framer name"), schedule="inactive",
                            where=self.where(m["framer"][1]))
        self.framer = framer
        if "be" in m:
            be = self.text_of(m["be"][1], "a schedule")
            if be not in SCHEDULES:
                raise self.error(f"unknown schedule {be!r}", m["be"][1],
                                 did_you_mean(be, SCHEDULES) or f"schedules: {', '.join(SCHEDULES)}")
            framer.schedule = be  # type: ignore[assignment]
        if "at" in m:
            framer.period = max(0.0, self.number(m["at"][1], "a period"))
        if "via" in m:
            framer.inode = self.inode(m["via"][1])
        if "frames" in m:
            for item in self.items(m["frames"][1], "frames"):
                framer.frames.append(self.frame(item))
        if "first" in m:
            framer.first = self.name(m["first"][1], "first frame")
        elif framer.frames:
            framer.first = framer.frames[0].name
        return framer

    def number(self, node: yaml.Node, what: str) -> float:
        value = self.value(node, what)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(f"{what} must be a number", node)
        return float(value)

    def frame(self, node: yaml.Node) -> FrameSpec:
        m = self.mapping(node, "a frame", ("frame", "in", "via", "next", "under", "aux", "acts"))
        if "frame" not in m:
            raise self.error("a frame needs 'frame: NAME'", node)
        name = self.name(m["frame"][1], "frame name")
        if name in ("next", "prev"):
            raise self.error(f"{name!r} is reserved and cannot name a frame", m["frame"][1])
        frame = FrameSpec(name, where=self.where(m["frame"][1]))
        if "in" in m:
            frame.over = self.name(m["in"][1], "over frame")
        if "via" in m:
            frame.inode = self.inode(m["via"][1])
        if "next" in m:
            frame.next = self.name(m["next"][1], "next frame")
        if "under" in m:
            frame.under = self.name(m["under"][1], "under frame")
        if "aux" in m:
            frame.auxes = [self.aux(n) for n in self.list_or_one(m["aux"][1])]
        if "acts" in m:
            frame.acts = [self.act(n) for n in self.items(m["acts"][1], "acts")]
        return frame

    def aux(self, node: yaml.Node) -> Aux:
        if isinstance(node, yaml.ScalarNode):
            return Aux(self.name(node, "aux framer name"), where=self.where(node))
        m = self.mapping(node, "an aux", ("framer", "if"))
        if "framer" not in m:
            raise self.error("an aux needs 'framer: NAME'", node)
        if "if" in m:
            raise self.error(
                "a conditional aux is an act: write '{aux: NAME, if: CONDITIONS}' in 'acts',"
                " where it should be tried among the transitions",
                m["if"][0],
            )
        return Aux(self.name(m["framer"][1], "aux framer name"), where=self.where(m["framer"][1]))

    def act(self, node: yaml.Node) -> Act:
        if not isinstance(node, yaml.MappingNode) or not node.value:
            raise self.error("an act must be a mapping such as 'do: counter' or 'go: next'", node)
        verbs = [k.value for k, _ in node.value if isinstance(k, yaml.ScalarNode) and k.value in ACT_KEYS]
        if len(verbs) != 1:
            first = node.value[0][0]
            key = str(getattr(first, "value", ""))
            if not verbs:
                hint = did_you_mean(key, ACT_KEYS) or f"verbs: {', '.join(ACT_KEYS)}"
                raise self.error(f"act has no verb (found {key!r})", first, hint)
            raise self.error(f"act has several verbs: {', '.join(verbs)}", first, "write one act per list item")
        verb = verbs[0]
        m = self.mapping(node, f"a '{verb}' act", (verb,) + ACT_KEYS[verb])
        key_node, main = m[verb]
        where = self.where(key_node)
        context = NATIVE.get(verb) or FIXED[verb]
        if "at" in m:
            ctx = self.text_of(m["at"][1], "a context")
            if ctx not in CONTEXTS:
                raise self.error(f"unknown context {ctx!r}", m["at"][1],
                                 did_you_mean(ctx, CONTEXTS) or f"contexts: {', '.join(CONTEXTS)}")
            context = ctx
        out_verb, args = _READERS[verb](self, m, main)
        context = FIXED.get(verb, context)
        return make_act(out_verb, context, args, where)

    # acts: each returns (model verb, args)

    def act_do(self, m: dict, main: yaml.Node) -> tuple[str, dict[str, Any]]:
        cur = self.cursor(main, "do", "a behaviour name")
        parts = []
        while not cur.at_end():
            tok = cur.take("a behaviour name")
            if tok.quoted or tok.reserved or not w.IDENT.match(tok.text.replace(".", "_")):
                raise cur.fail(f"invalid word {tok.text!r} in a behaviour name", tok)
            parts.append(tok.text)
        args: dict[str, Any] = {"behaviour": ".".join(parts)}
        if "as" in m:
            args["name"] = self.text_of(m["as"][1], "an act name")
        if "via" in m:
            args["inode"] = self.inode(m["via"][1])
        for key in ("with", "per"):
            if key in m:
                args[key] = self.data(m[key][1], f"'{key}' data")
        for key in ("from", "to"):
            if key in m:
                args[key] = self.refs(m[key][1], f"a '{key}' share")
        return "do", args

    def act_put(self, m: dict, main: yaml.Node) -> tuple[str, dict[str, Any]]:
        if "into" not in m:
            raise self.error("'put' needs 'into: SHARE'", main)
        return "put", {"data": self.data(main, "put data"), "dst": self.ref(m["into"][1])}

    def _with_or_from(self, verb: str, m: dict, main: yaml.Node, dst: Ref, numbers: bool) -> tuple[str, dict]:
        if ("with" in m) == ("from" in m):
            raise self.error(f"'{verb}' needs one of 'with: DATA' or 'from: SOURCE'", main)
        if "with" in m:
            data = self.data(m["with"][1], f"{verb} data")
            if numbers:
                for key, val in data.items():
                    if isinstance(val, bool) or not isinstance(val, (int, float)):
                        raise self.error(f"'inc' needs numbers; {key} is {val!r}", m["with"][1])
            return verb, {"dst": dst, "data": data}
        return verb, {"dst": dst, "src": self.ref(m["from"][1])}

    def act_inc(self, m: dict, main: yaml.Node) -> tuple[str, dict[str, Any]]:
        return self._with_or_from("inc", m, main, self.ref(main), numbers=True)

    def act_set(self, m: dict, main: yaml.Node) -> tuple[str, dict[str, Any]]:
        text = self.text_of(main, "a goal share")
        dst = Ref(f"framer.me.goal.{text}") if text in ("elapsed", "recurred") else self.ref(main, "a goal share")
        return self._with_or_from("set", m, main, dst, numbers=False)

    def act_copy(self, m: dict, main: yaml.Node) -> tuple[str, dict[str, Any]]:
        if "into" not in m:
            raise self.error("'copy' needs 'into: SHARE'", main)
        return "copy", {"src": self.ref(main), "dst": self.ref(m["into"][1])}

    def act_print(self, m: dict, main: yaml.Node) -> tuple[str, dict[str, Any]]:
        value = self.value(main, "a message")
        return "print", {"message": "" if value is None else self.text_of(main, "a message")}

    def taskers(self, node: yaml.Node | None, default: list[str]) -> list[str]:
        if node is None or (isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null")):
            return list(default)
        found = [self.name(n, "tasker name") for n in self.list_or_one(node)]
        return found or list(default)

    def act_bid(self, m: dict, main: yaml.Node) -> tuple[str, dict[str, Any]]:
        control = self.text_of(main, "a bid control")
        controls = ("start", "run", "stop", "abort", "ready")
        if control not in controls:
            raise self.error(f"unknown bid control {control!r}", main, did_you_mean(control, controls))
        period: float | Ref | None = None
        if "period" in m:
            node = m["period"][1]
            value = self.value(node, "a period") if isinstance(node, yaml.ScalarNode) else None
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                period = max(0.0, float(value))
            else:
                period = self.ref(node, "a period share")
        return "bid", {"control": control, "taskers": self.taskers(m.get("taskers", (None, None))[1], ["me"]),
                       "period": period}

    def _fiat(self, verb: str, main: yaml.Node) -> tuple[str, dict[str, Any]]:
        found = self.taskers(main, [])
        if not found:
            raise self.error(f"'{verb}' needs a tasker name", main)
        return verb, {"taskers": found}

    def act_ready(self, m: dict, main: yaml.Node) -> tuple[str, dict[str, Any]]:
        return self._fiat("ready", main)

    def act_start(self, m: dict, main: yaml.Node) -> tuple[str, dict[str, Any]]:
        return self._fiat("start", main)

    def act_stop(self, m: dict, main: yaml.Node) -> tuple[str, dict[str, Any]]:
        return self._fiat("stop", main)

    def act_run(self, m: dict, main: yaml.Node) -> tuple[str, dict[str, Any]]:
        return self._fiat("run", main)

    def act_abort(self, m: dict, main: yaml.Node) -> tuple[str, dict[str, Any]]:
        return self._fiat("abort", main)

    def act_done(self, m: dict, main: yaml.Node) -> tuple[str, dict[str, Any]]:
        return "done", {"taskers": self.taskers(main, ["me"])}

    def act_go(self, m: dict, main: yaml.Node) -> tuple[str, dict[str, Any]]:
        far = self.name(main, "go target (a frame name, next or me)")
        texts: list[str] = []
        needs: list[Need] = []
        if "if" in m:
            needs = self.conditions(m["if"][1])
            texts = [self.text_of(n, "a condition") for n in self.list_or_one(m["if"][1])]
        human = self.text_of(m["human"][1], "human") if "human" in m else go_human(far, texts)
        return "go", {"far": far, "needs": needs or [Need("always", where=self.where(main))], "human": human}

    def act_timeout(self, m: dict, main: yaml.Node) -> tuple[str, dict[str, Any]]:
        value = abs(self.number(main, "a timeout"))
        human = self.text_of(m["human"][1], "human") if "human" in m else f"timeout {main.value}"
        need = Need("elapsed", op=">=", goal_value=value, where=self.where(main))
        return "go", {"far": "next", "needs": [need], "human": human}

    def act_repeat(self, m: dict, main: yaml.Node) -> tuple[str, dict[str, Any]]:
        value = int(abs(self.number(main, "a repeat count")))
        human = self.text_of(m["human"][1], "human") if "human" in m else f"repeat {main.value}"
        need = Need("recurred", op=">=", goal_value=value, where=self.where(main))
        return "go", {"far": "next", "needs": [need], "human": human}

    def act_let(self, m: dict, main: yaml.Node) -> tuple[str, dict[str, Any]]:
        return "let", {"needs": self.conditions(main)}

    def act_aux(self, m: dict, main: yaml.Node) -> tuple[str, dict[str, Any]]:
        """A conditional aux, ordered among the transitions: ``{aux: NAME, if: NEEDS}``."""
        if "if" not in m:
            raise self.error("an 'aux' act needs 'if: CONDITIONS' (a plain aux goes in the frame's 'aux' list)", main)
        return "aux", {"framer": self.name(main, "aux framer name"), "needs": self.conditions(m["if"][1])}


#: By verb: its YAML reader, ``act_VERB(reader, mapping, main node) -> (model verb, args)``.
_READERS: dict[str, Callable[[_Reader, Pairs, yaml.Node], tuple[str, dict[str, Any]]]] = each(
    {name[4:]: fn for name, fn in vars(_Reader).items() if name.startswith("act_")}, "the YAML reader (yamlflow.py)")
