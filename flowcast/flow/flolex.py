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


class Statement:
    """A verb and its arguments, possibly gathered from several lines.

    A statement written on one plain line (no quote, comment or
    continuation: most lines of a big flow) is kept as its words until
    someone asks for :attr:`tokens`.  The parser's fast paths read
    :attr:`words` and build positions only where the model keeps them, so
    the many simple statements of a big flow never pay for Token objects.
    """

    __slots__ = ("_tokens", "words", "number", "line", "file")

    def __init__(self, tokens: list[Token] | None = None) -> None:
        self._tokens: list[Token] | None = [] if tokens is None else tokens
        #: The words of a still-unmaterialised plain one-line statement, else None.
        self.words: list[str] | None = None

    @classmethod
    def plain(cls, words: list[str], number: int, line: str, file: str) -> Statement:
        """A statement that is exactly the non-blank words of one plain physical line."""
        st = cls.__new__(cls)
        st._tokens = None
        st.words = words
        st.number = number
        st.line = line
        st.file = file
        return st

    @property
    def tokens(self) -> list[Token]:
        if self._tokens is None:
            self._tokens = []
            _plain_tokens(self.line, self.number, self.file, self._tokens, self.words)
            self.words = None  # the token list may now grow (continuations): no longer plain
        return self._tokens

    def where(self, k: int) -> Where:
        """Where word ``k`` of a plain statement is: what ``tokens[k].where`` would give."""
        words = self.words
        if words is None:  # materialised since
            return self.tokens[k].where
        line = self.line
        pos = 0
        for j in range(k):
            pos = line.find(words[j], pos) + len(words[j])
        return Where(self.file, self.number, line.find(words[k], pos) + 1, line)

    @property
    def verb(self) -> Token:
        return self.tokens[0]

    @property
    def verb_text(self) -> str:
        return self.words[0] if self.words is not None else self.tokens[0].text

    @property
    def human(self) -> str:
        """The statement as one line, as Ioflo shows it in traces."""
        if self.words is not None:
            return " ".join(self.words)
        return " ".join(t.text for t in self.tokens)

    def __repr__(self) -> str:
        return f"Statement({self.tokens!r})"


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


#: Characters that make a line need :func:`chunk`'s full treatment: quotes,
#: comments and backslash continuations.  Most lines have none of them.
_SPECIAL = re.compile(r"[\"'#\\]").search


def _plain_tokens(line: str, number: int, file: str, into: list[Token], words: list[str] | None = None) -> None:
    """Append the tokens of a line with no quote, comment or backslash.

    The same tokens :func:`chunk` makes, without its checks: lexing a big
    flow is mostly such lines, so this is the path that must be quick.
    ``words`` is ``line.split()`` when the caller already has it.
    """
    pos = 0
    find = line.find
    for piece in line.split() if words is None else words:
        start = find(piece, pos)
        into.append(Token(piece, number, start + 1, line, file))
        pos = start + len(piece)


def _logical_lines(text: str, file: str) -> list[list[Token] | Statement]:
    """Join backslash-continued physical lines; drop empty ones.

    A plain line that starts a logical line and does not start with a
    connective comes back as a lazy :meth:`Statement.plain`; every other
    logical line as its tokens.
    """
    logical: list[list[Token] | Statement] = []
    current: list[Token] = []
    swallow = False  # Ioflo joins before stripping comments: a comment eats continued lines
    for number, line in enumerate(split_lines(text), start=1):
        if not swallow and _SPECIAL(line) is None:  # cannot be continued, commented or quoted
            if current:  # the last line of a backslash-continued logical line
                _plain_tokens(line, number, file, current)
                logical.append(current)
                current = []
                continue
            words = line.split()
            if not words:
                continue
            if words[0] in RESERVED:  # continues the statement before: lex joins the tokens
                _plain_tokens(line, number, file, current)
                logical.append(current)
                current = []
            else:
                logical.append(Statement.plain(words, number, line, file))
            continue
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
        if type(tokens) is Statement:  # a plain line starting with a verb
            statements.append(tokens)
            continue
        first = tokens[0]
        if first.reserved:
            if not statements:
                raise FlowError(
                    f"line starts with connective {first.text!r} but there is no statement to continue",
                    first.where,
                    hint="a line starting with a connective continues the statement above it",
                )
            if statements[-1].verb_text != "load":
                statements[-1].tokens.extend(tokens)
                continue
        statements.append(Statement(tokens))  # each logical line is a fresh list
    return statements
