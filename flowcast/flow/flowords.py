"""The small grammar pieces FloScript statements share: values, fields, paths.

Each follows the Ioflo 2.0.3 builder routine of the same job (named in the
docstrings) so a script means here what it means to Ioflo; the difference is
that every failure is a located :class:`FlowError` instead of a ParseError
about "tokens".
"""

from __future__ import annotations

import math
import re
from typing import Any

from flowcast.flow.errors import FlowError, did_you_mean
from flowcast.flow.flolex import COMPARISONS, RESERVED, Statement, Token
from flowcast.flow.spec import Ref, Where

IDENT = re.compile(r"^[a-zA-Z]\w*$")  # Ioflo's REO_IdentPub
_IDENT_MATCH = IDENT.match
# Ioflo writes the first segment ``([a-zA-Z_]\w*)+``, which matches the same
# words as ``[a-zA-Z_]\w*`` but backtracks exponentially on a long one that
# fails (``aaaa...a-``): written here without the repetition.
_REL_PATH = re.compile(r"^[a-zA-Z_]\w*([.][a-zA-Z_]\w*)*$")
_DOT_PATH = re.compile(r"^([.][a-zA-Z_]\w*)+$")
_REL_NODE = re.compile(r"^[a-zA-Z_]\w*(([.][a-zA-Z_]\w*)*$|([.][a-zA-Z_]\w*)*[.]$)")
_DOT_NODE = re.compile(r"^([.][a-zA-Z_]\w*)+$|^([.][a-zA-Z_]\w*)+[.]$")
_PATH_NODE = re.compile(
    r"^[a-zA-Z_]\w*(([.][a-zA-Z_]\w*)*$|([.][a-zA-Z_]\w*)*[.]$)|^([.][a-zA-Z_]\w*)+$|^([.][a-zA-Z_]\w*)+[.]$"
)
_LAT_NE = re.compile(r"^(\d+)[NEne](\d+\.\d+)$")
_LAT_SW = re.compile(r"^(\d+)[SWsw](\d+\.\d+)$")
_NUM = r"([-+]?\d+\.\d*|[-+]?\d+)"
_POINT = re.compile(
    rf"^{_NUM}?[Xx]{_NUM}[Yy]$|^{_NUM}[Xx]{_NUM}[Yy]{_NUM}[Zz]$|^{_NUM}[Nn]{_NUM}[Ee]$"
    rf"|^{_NUM}[Nn]{_NUM}[Ee]{_NUM}[Dd]$|^{_NUM}[Ff]{_NUM}[Ss]$|^{_NUM}[Ff]{_NUM}[Ss]{_NUM}[Bb]$"
)


class Cursor:
    """Reads one statement's tokens left to right, reporting where it fails."""

    def __init__(self, statement: Statement) -> None:
        self.tokens = statement.tokens
        self.statement = statement
        self.i = 1  # past the verb

    @property
    def verb(self) -> str:
        return self.tokens[0].text

    # The reading methods below are the parser's inner loop: they index the
    # token list directly rather than through one another.

    def peek(self, ahead: int = 0) -> Token | None:
        j = self.i + ahead
        tokens = self.tokens
        return tokens[j] if j < len(tokens) else None

    def at_end(self) -> bool:
        return self.i >= len(self.tokens)

    def here(self) -> Where:
        """The current token, or just past the last one at the end."""
        tok = self.peek()
        return tok.where if tok is not None else self.tokens[-1].end

    def take(self, what: str) -> Token:
        """The next token, which must exist; ``what`` names it for the error."""
        i = self.i
        tokens = self.tokens
        if i >= len(tokens):
            raise FlowError(f"'{self.verb}' needs {what} here", self.here())
        self.i = i + 1
        return tokens[i]

    def take_word(self, what: str) -> Token:
        """The next token, which must not be a connective."""
        tok = self.take(what)
        if tok.reserved:
            raise FlowError(f"expected {what}, found connective {tok.text!r}", tok.where)
        return tok

    def take_name(self, what: str) -> Token:
        """A name as Ioflo's ``verifyName`` accepts it: an identifier, not reserved."""
        i = self.i
        tokens = self.tokens
        if i < len(tokens):
            tok = tokens[i]
            if not tok.reserved and not tok.quoted and _IDENT_MATCH(tok.text):
                self.i = i + 1
                return tok
        tok = self.take_word(what)  # not a name: say why, as ever
        if tok.quoted or not IDENT.match(tok.text):
            raise FlowError(f"invalid {what} {tok.text!r}: expected a name like 'idle' or 'leg2'", tok.where)
        return tok

    def accept(self, *words: str) -> Token | None:
        tok = self.peek()
        if tok is not None and not tok.quoted and tok.text in words:
            self.i += 1
            return tok
        return None

    def fail(self, message: str, tok: Token | None = None, hint: str = "") -> FlowError:
        return FlowError(message, tok.where if tok is not None else self.here(), hint)

    def done(self) -> None:
        """No tokens may be left over (Ioflo's "Unused tokens")."""
        tok = self.peek()
        if tok is not None:
            raise FlowError(f"unexpected {tok.text!r}: '{self.verb}' statement should end here", tok.where)


# -- values -----------------------------------------------------------------


def number(text: str) -> int | float:
    """Ioflo's ``Convert2Num``: decimal int, then hex int, then float.

    Note Ioflo's order: ``1e5`` is the hex number 0x1e5 = 485, not 100000.
    Complex numbers, which Ioflo also accepts, are refused: the model is
    plain YAML data.
    """
    if "." not in text:  # int() never takes a point: spare a float the two failed tries
        try:
            return int(text, 10)
        except ValueError:
            pass
        try:
            return int(text, 16)
        except ValueError:
            pass
    try:
        return float(text)
    except ValueError:
        pass
    raise ValueError(text)


def _coord(text: str) -> float | None:
    m = _LAT_NE.match(text)
    if m:
        return float(m.group(1)) + float(m.group(2)) / 60.0
    m = _LAT_SW.match(text)
    if m:
        return -(float(m.group(1)) + float(m.group(2)) / 60.0)
    return None


def _literal(tok: Token) -> tuple[bool, Any]:
    """(True, value) when ``tok`` is a quoted string, none, boolean, coordinate or number."""
    if tok.quoted:
        return True, tok.value
    text = tok.text
    low = text.lower()
    if low == "none":
        return True, None
    if low in ("true", "yes"):
        return True, True
    if low in ("false", "no"):
        return True, False
    return False, None


def _numeric(tok: Token) -> tuple[bool, Any]:
    text = tok.text
    coord = _coord(text)
    if coord is not None:
        return True, coord
    if _POINT.match(text):
        raise FlowError(f"point value {text!r} is not supported by flowcast", tok.where,
                        hint="write the coordinates as separate fields, e.g. 'x 1.0 y 2.0'")
    try:
        return True, number(text)
    except ValueError:
        pass
    try:
        complex(text)
    except ValueError:
        return False, None
    raise FlowError(f"complex number {text!r} is not supported by flowcast", tok.where)


def data_value(tok: Token) -> Any:
    """Ioflo's ``Convert2StrBoolPathCoordPointNum``: bare names stay strings."""
    ok, value = _literal(tok)
    if ok:
        return value
    if _PATH_NODE.match(tok.text):
        return tok.text
    ok, value = _numeric(tok)
    if ok:
        return value
    raise FlowError(
        f"invalid value {tok.text!r}",
        tok.where,
        hint="a value is a number, a quoted string, true/false, none, or a name such as 'green'",
    )


def goal_literal(tok: Token) -> tuple[bool, Any]:
    """Ioflo's ``Convert2StrBoolCoordNum``: a direct goal, or (False, None) for a path."""
    ok, value = _literal(tok)
    if ok:
        return True, value
    return _numeric(tok)


def real(tok: Token, what: str) -> float:
    """A plain number (period, timeout, tolerance)."""
    try:
        value = float(number(tok.text)) if not tok.quoted else math.nan
    except ValueError:
        value = math.nan
    except OverflowError:  # an integer with hundreds of digits
        value = math.inf
    if math.isnan(value):
        raise FlowError(f"expected {what} as a number, found {tok.text!r}", tok.where)
    if math.isinf(value):
        raise FlowError(f"{what} {tok.text[:20]}{'...' if len(tok.text) > 20 else ''} is too large", tok.where)
    return value


def direct(cur: Cursor) -> dict[str, Any]:
    """Ioflo's ``parseDirect``: ``value`` or ``field value [field value ...]``.

    A lone value means field ``value``; pairs stop at the first connective.
    """
    data: dict[str, Any] = {}
    first = cur.take("data (a value, or field value pairs)")
    if first.reserved:
        raise FlowError(f"expected a value, found connective {first.text!r}", first.where)
    second = cur.peek()
    if second is None or second.reserved:
        data["value"] = data_value(first)
    else:
        if not IDENT.match(first.value):
            typo = did_you_mean(second.text, sorted(RESERVED))
            if typo:  # '1 int .x': a misspelt connective, not a field named '1'
                raise FlowError(f"unexpected {second.text!r} after the data", second.where, hint=typo)
        cur.i += 1
        data[_field_name(first)] = data_value(second)
        while (tok := cur.peek()) is not None and not tok.reserved:
            cur.i += 1
            val = cur.peek()
            if val is None or val.reserved:
                raise FlowError(f"field {tok.value!r} has no value", val.where if val else tok.end)
            cur.i += 1
            name = _field_name(tok)
            if name in data:
                raise FlowError(f"field {name!r} given twice", tok.where)
            data[name] = data_value(val)
    if len(data) > 1 and "value" in data:
        raise FlowError("field 'value' must be the only field when given", first.where,
                        hint="as in Ioflo, where 'value' is the field a share is read by when none is named; "
                             "give the others in a second statement, e.g. 'init .x with value 20.0' then 'init .x with seq 0'")
    return data


def _field_name(tok: Token) -> str:
    name = tok.value
    if not IDENT.match(name):
        raise FlowError(f"invalid field name {name!r}", tok.where, hint="a field is an identifier such as 'value' or 'depth'")
    return name


# -- fields and paths ---------------------------------------------------------


def fields(cur: Cursor, single: bool = False) -> tuple[str, ...]:
    """Ioflo's ``parseFields``/``parseField``: an optional ``FIELD ... in`` prefix.

    Words up to an ``in`` are fields; if a connective or the end comes
    first there was no field clause and nothing is consumed.
    """
    j = cur.i
    found: list[Token] = []
    while j < len(cur.tokens):
        tok = cur.tokens[j]
        if not tok.quoted and tok.text == "in":
            break
        if tok.reserved:
            return ()
        found.append(tok)
        j += 1
    else:
        return ()
    if not found:
        return ()
    names = tuple(_field_name(t) for t in found)
    if single and len(names) > 1:
        raise FlowError(f"only one field may be named here, found {len(names)}", found[1].where)
    if len(names) > 1 and "value" in names:
        raise FlowError("field 'value' cannot be combined with other fields", found[0].where)
    cur.i = j + 1
    return names


def plain_path(cur: Cursor, what: str = "a share path") -> str:
    """Ioflo's ``parsePath``: a path with no relation clause (``init``)."""
    tok = cur.take_word(what)
    if tok.quoted or not (_REL_PATH.match(tok.text) or _DOT_PATH.match(tok.text)):
        raise FlowError(f"invalid share path {tok.text!r}", tok.where, hint="a path looks like '.a.b' (absolute) or 'a.b'")
    return tok.text


def indirect(cur: Cursor, node: bool = False, what: str = "a share path") -> str:
    """Ioflo's ``parseIndirect``: a path and its optional ``of RELATION``.

    The result is normalised as the builder expects: ``x of me`` ->
    ``me.x``; ``x of framer [NAME]`` -> ``framer.NAME.x``; ``x of frame
    [NAME] [of framer NAME]`` -> ``framer.F.frame.NAME.x``; an inline
    ``frame.NAME.x`` gains ``framer.me.`` and ``actor.NAME.x`` gains
    ``framer.me.frame.me.``.  With ``node`` a trailing dot is allowed (inodes).
    """
    tok = cur.take_word(what)
    path = tok.text
    dot_re, rel_re = (_DOT_NODE, _REL_NODE) if node else (_DOT_PATH, _REL_PATH)
    if tok.quoted:
        raise FlowError(f"invalid share path {path}: paths are not quoted", tok.where)
    if dot_re.match(path):
        relation = _relation(cur)
    elif rel_re.match(path):
        relation = _relation(cur)
        chunks = path.split(".")
        if relation:
            head = chunks[0]
            if head in ("framer", "frame", "actor") and (
                head == "framer"
                or (head == "frame" and ".frame." in relation)
                or (head == "actor" and ".actor." in relation)
                or relation == "me"
            ):
                raise FlowError(f"path {path!r} conflicts with its relation {relation!r}", tok.where)
        elif chunks[0] == "actor":
            if len(chunks) < 3:
                raise FlowError(f"incomplete path {path!r}: expected actor.NAME.share", tok.where)
            relation = "framer.me.frame.me"
        elif chunks[0] == "frame":
            if len(chunks) < 3:
                raise FlowError(f"incomplete path {path!r}: expected frame.NAME.share", tok.where)
            relation = "framer." + ("main" if chunks[1] == "main" else "me")
        if relation:
            relation += "."
    else:
        raise FlowError(f"invalid share path {path!r}", tok.where, hint="a path looks like '.a.b' (absolute) or 'a.b'")
    return relation + path


def plain_indirect(word: str, node: bool = False) -> str | None:
    """What :func:`indirect` makes of an unquoted ``word`` not followed by ``of``.

    None when it would fail or rewrite the path (``frame.X.y``,
    ``actor.X.y``): the parser's fast paths then leave the statement to
    the general one, which says why.
    """
    if word in RESERVED:
        return None
    dot_re, rel_re = (_DOT_NODE, _REL_NODE) if node else (_DOT_PATH, _REL_PATH)
    if dot_re.match(word) or (rel_re.match(word) and word.split(".", 1)[0] not in ("actor", "frame")):
        return word
    return None


def plain_value(word: str) -> tuple[bool, Any]:
    """(True, :func:`data_value`) of an unquoted ``word``, or (False, None) when that fails."""
    try:
        return True, data_value(Token(word, 0, 0, "", ""))
    except FlowError:
        return False, None


def _relation_name(cur: Cursor, default: str) -> str:
    tok = cur.peek()
    if tok is None or tok.reserved:
        return default
    cur.i += 1
    if tok.quoted or not IDENT.match(tok.text):
        raise FlowError(f"invalid name {tok.text!r} in relation", tok.where)
    return tok.text


def _relation(cur: Cursor, framer_default: str = "") -> str:
    """Ioflo's ``parseRelation``: ``of (root|me|framer [N]|frame [N]|actor [N])``."""
    relation = ""
    if not cur.accept("of"):
        return relation
    tok = cur.take("a relation (root, me, framer, frame or actor)")
    kind = tok.text
    if kind not in ("root", "me", "framer", "frame", "actor"):
        raise FlowError(
            f"invalid relation {kind!r}",
            tok.where,
            hint="relations are root, me, framer [NAME], frame [NAME], actor [NAME]",
        )
    if kind == "root":
        return ""
    if kind == "me":
        return "me"
    if kind == "framer":
        return "framer." + _relation_name(cur, framer_default or "me")
    if kind == "frame":
        name = _relation_name(cur, "me")
        outer = _relation(cur, "main" if name == "main" else "")
        if outer and (".frame." in outer or ".actor." in outer or not outer.startswith("framer.")):
            raise FlowError(f"relation {outer!r} cannot follow a frame relation", tok.where)
        if not outer:
            outer = "framer." + ("main" if name == "main" else "me")
        return f"{outer}.frame.{name}"
    # actor
    name = _relation_name(cur, "me")
    outer = _relation(cur)
    if outer and ".actor." in outer:
        raise FlowError(f"relation {outer!r} cannot follow an actor relation", tok.where)
    if not outer:
        outer = "framer.me.frame.me"
    return f"{outer}.actor.{name}"


def ref(cur: Cursor, node: bool = False, single: bool = False, what: str = "a share path") -> Ref:
    """``[FIELD ... in] PATH [of RELATION]`` as a :class:`Ref`."""
    names = fields(cur, single=single)
    return Ref(indirect(cur, node=node, what=what), names)


def comparison(cur: Cursor) -> str | None:
    tok = cur.peek()
    if tok is not None and not tok.quoted and tok.text in COMPARISONS:
        cur.i += 1
        return tok.text
    return None
