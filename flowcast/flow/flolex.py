"""FloScript lexing: text -> statements of located tokens.

FloScript has no block structure a lexer must track -- indentation means
nothing -- but a statement may span several physical lines, two ways:

* a line ending in ``\\`` joins the next line;
* a line whose first token is a connective (``with``, ``if``, ``and``, a
  comparison, ...) continues the statement before it, even across blank and
  comment lines.

Tokens are chunks of non-blank text or quoted strings (single or double),
as Ioflo's ``REO_Chunks`` cuts them; a chunk that starts with ``#`` starts a
comment.  Every token keeps its line and column so that any later error can
point at it.  Unlike Ioflo, an unbalanced quote is an error here rather than
a silently dropped character.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from flowcast.flow.errors import FlowError
from flowcast.flow.spec import Where

#: Ioflo's connectives and comparisons: words that never start a statement,
#: so a line starting with one continues the statement before it.
COMPARISONS: tuple[str, ...] = ("==", "<", "<=", ">=", ">", "!=")
CONNECTIVES: tuple[str, ...] = (
    "to", "by", "with", "from", "per", "for", "cum", "qua", "via",
    "as", "at", "in", "of", "on", "re", "is",
    "if", "be", "into", "and", "not", "+-",
)
RESERVED: frozenset[str] = frozenset(CONNECTIVES + COMPARISONS)

_CHUNK = re.compile(r"""#.*|[^\s"']+|"[^"]*"|'[^']*'""")


class Token:
    """One chunk of a statement, with where it was written."""

    __slots__ = ("text", "line", "col", "source", "file", "quoted", "reserved")

    def __init__(self, text: str, line: int, col: int, source: str, file: str) -> None:
        self.text = text  # as written, quotes included
        self.line = line
        self.col = col
        self.source = source  # the whole physical line, for the caret display
        self.file = file
        self.quoted = len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'"
        self.reserved = not self.quoted and text in RESERVED

    def __repr__(self) -> str:
        return f"Token({self.text!r}, {self.line}, {self.col})"

    @property
    def value(self) -> str:
        """The text with one pair of enclosing quotes removed."""
        return self.text[1:-1] if self.quoted else self.text

    @property
    def where(self) -> Where:
        return Where(self.file, self.line, self.col, self.source)

    @property
    def end(self) -> Where:
        """Just past this token: where a missing next token would go."""
        return Where(self.file, self.line, self.col + len(self.text), self.source)


@dataclass
class Statement:
    """A verb and its arguments, possibly gathered from several lines."""

    tokens: list[Token] = field(default_factory=list)

    @property
    def verb(self) -> Token:
        return self.tokens[0]

    @property
    def human(self) -> str:
        """The statement as one line, as Ioflo shows it in traces."""
        return " ".join(t.text for t in self.tokens)


def split_lines(text: str) -> list[str]:
    """Physical lines the way a text-mode file reads them (universal newlines)."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def chunk(text: str, file: str, line: int, source: str | None = None, offset: int = 0,
          exact: bool = True) -> tuple[list[Token], bool]:
    """Tokens of one line of text, and whether a comment ended it.

    ``source``/``offset`` place text that is part of a longer line (a YAML
    scalar): columns are shifted by ``offset``.  When the text does not
    map character for character onto the source (``exact`` false), every
    token is placed at ``offset``.
    """
    src = text if source is None else source
    tokens: list[Token] = []
    pos = 0
    if '"' not in text and "'" not in text and "#" not in text:  # the common line: plain words
        for piece in text.split():
            start = text.find(piece, pos)
            tokens.append(Token(piece, line, offset + (start if exact else 0) + 1, src, file))
            pos = start + len(piece)
        return tokens, False
    for match in _CHUNK.finditer(text):
        start = match.start()
        if start != pos and text[pos:start].strip():  # only an unmatched quote leaves text behind
            raise _unterminated(text, pos, start, file, line, src, offset, exact)
        piece = match.group()
        if piece[0] == "#":
            return tokens, True
        tokens.append(Token(piece, line, offset + (start if exact else 0) + 1, src, file))
        pos = match.end()
    if pos != len(text) and text[pos:].strip():
        raise _unterminated(text, pos, len(text), file, line, src, offset, exact)
    return tokens, False


def _unterminated(text: str, pos: int, stop: int, file: str, line: int, src: str, offset: int,
                  exact: bool) -> FlowError:
    gap = text[pos:stop]
    at = pos + len(gap) - len(gap.lstrip())
    return FlowError(
        "unterminated string: this quote is never closed on its line",
        Where(file, line, offset + (at if exact else 0) + 1, src),
        hint="quoted strings cannot span lines; close the quote",
    )


def _logical_lines(text: str, file: str) -> list[list[Token]]:
    """Join backslash-continued physical lines; drop empty ones."""
    logical: list[list[Token]] = []
    current: list[Token] = []
    swallow = False  # Ioflo joins before stripping comments: a comment eats continued lines
    for number, line in enumerate(split_lines(text), start=1):
        stripped = line.rstrip()
        continued = stripped.endswith("\\")
        if continued:
            stripped = stripped[:-1]
        if not swallow:
            tokens, commented = chunk(stripped, file, number, line)
            current.extend(tokens)
            swallow = commented and continued
        elif not continued:
            swallow = False
        if not continued:
            if current:
                logical.append(current)
            current = []
            swallow = False
    if current:
        logical.append(current)
    return logical


def lex(text: str, file: str = "<string>") -> list[Statement]:
    """Statements of a FloScript text, connective continuations joined.

    ``load`` statements are never continued, as in Ioflo, because a load
    switches files there.
    """
    statements: list[Statement] = []
    for tokens in _logical_lines(text, file):
        first = tokens[0]
        if first.reserved:
            if not statements:
                raise FlowError(
                    f"line starts with connective {first.text!r} but there is no statement to continue",
                    first.where,
                    hint="a line starting with a connective continues the statement above it",
                )
            if statements[-1].verb.text != "load":
                statements[-1].tokens.extend(tokens)
                continue
        statements.append(Statement(list(tokens)))
    return statements
