"""Located errors: the one place that says where in a file something is wrong.

Every error found while loading or resolving a flow -- a syntax slip, an
unknown behaviour, a frame name with a typo -- and every problem in an
estate layout is a :class:`FlowError` carrying the :class:`Where` it came
from, so a person sees ``file:line:col``, the line, and a caret under the
spot, worded the same whichever reader found it (flows, layouts, the CLI
all print these).  Nothing runs when a flow has an error: loaders collect
and raise before any house starts.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from flowcast.errors import Error, did_you_mean

__all__ = ["FlowError", "FlowErrors", "Where", "clipped", "decode_error", "did_you_mean", "excerpt",
           "printable", "read_text"]

#: Characters of the source line shown either side of the error's column.
#: A minified or binary "line" can be megabytes; the error shows a window
#: around the spot, never the whole line (a 5 MB line once meant 10 MB of
#: stderr).
CLIP = 80
ELLIPSIS = "..."
MAX_MESSAGE = 2000  # a message (or hint) longer than this is cut
_LONG_WORD = re.compile(r"[^\s'\"]{%d,}" % (2 * CLIP + 1))  # messages quote source words: clip huge ones


@dataclass(frozen=True)
class Where:
    """A source position: 1-based line and column, and the line's text."""

    file: str
    line: int
    col: int
    text: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


def printable(char: str) -> str:
    """``char`` as shown in an error: control and format characters escaped.

    A NUL, an escape sequence or a bidi override printed raw can hide or
    rewrite what the terminal shows; escaped, each is visible text.
    """
    if char == "\t":
        return " "
    if unicodedata.category(char) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"):
        code = ord(char)
        return f"\\x{code:02x}" if code < 0x100 else (f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return char


def excerpt(text: str, col: int, clip: int = CLIP) -> tuple[str, int]:
    """The part of ``text`` shown around 1-based ``col``, and where the caret goes (0-based).

    At most ``clip`` characters either side, with an ellipsis where the line
    was cut; control characters escaped, the caret moved to match.
    """
    line = text.rstrip("\r\n")
    at = max(0, min(col - 1, len(line)))
    start, end = max(0, at - clip), min(len(line), at + clip)
    before = "".join(printable(c) for c in line[start:at])
    after = "".join(printable(c) for c in line[at:end])
    head = ELLIPSIS if start > 0 else ""
    tail = ELLIPSIS if end < len(line) else ""
    return head + before + after + tail, len(head) + len(before)


def clipped(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` escaped, its huge words and its whole cut (an ellipsis says where)."""
    if len(text) > 2 * CLIP:
        text = _LONG_WORD.sub(lambda m: m.group()[:CLIP] + ELLIPSIS, text)
    if len(text) > limit:
        text = text[: limit - len(ELLIPSIS)] + ELLIPSIS
    if text.isprintable():
        return text
    return "".join(c if c == "\n" else printable(c) for c in text)


def read_text(path: str | Path) -> str:
    """A flow file's text; invalid UTF-8 is a :class:`FlowError` at its line and column.

    A byte offset alone sends a person to a hex dump; line:col and the line
    (with the bad bytes shown as U+FFFD) send them to the spot in an editor.
    ``OSError`` passes through for the caller to word.
    """
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise decode_error(str(path), data, exc) from None
    if "\r" in text:  # universal newlines, as Path.read_text gave
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


def decode_error(file: str, data: bytes, exc: UnicodeDecodeError) -> "FlowError":
    """The located error for ``exc`` raised decoding ``data`` (the whole file) as UTF-8."""
    start = data.rfind(b"\n", 0, exc.start) + 1
    end = data.find(b"\n", exc.start)
    end = len(data) if end < 0 else end
    line = data.count(b"\n", 0, exc.start) + 1
    col = len(data[start : exc.start].decode("utf-8", errors="replace")) + 1
    text = data[start:end].decode("utf-8", errors="replace")
    bad = data[exc.start : exc.end].hex(" ")
    return FlowError(f"not a UTF-8 text file: {exc.reason} (byte(s) {bad}, offset {exc.start})",
                     Where(file, line, col, text))


class FlowError(Error):
    """One error in a flow script, located."""

    def __init__(self, message: str, where: Where | None = None, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.where = where
        self.hint = hint

    def __str__(self) -> str:
        message = clipped(self.message)
        if self.where is None:
            text = f"error: {message}"
        else:
            w = self.where
            text = f"{clipped(str(w.file))}:{w.line}:{w.col}: error: {message}"
            if w.text:
                line, caret = excerpt(w.text, w.col)
                text += f"\n    {line}\n    {' ' * caret}^"
        if self.hint:
            text += f"\n  {clipped(self.hint)}"
        return text


class FlowErrors(FlowError):
    """Several errors found in one pass; ``str`` lists them all."""

    def __init__(self, errors: list[FlowError]) -> None:
        self.errors = errors
        first = errors[0]
        super().__init__(first.message, first.where, first.hint)

    def __str__(self) -> str:
        return "\n".join(str(e) for e in self.errors)
