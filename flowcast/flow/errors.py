"""Flow-script errors that point at the source.

Every error found while loading or resolving a flow -- a syntax slip, an
unknown behaviour, a frame name with a typo -- is a :class:`FlowError`
carrying the :class:`~flowcast.flow.spec.Where` it came from, so a person
sees ``file:line:col``, the line, and a caret under the spot.  Nothing runs
when a flow has an error: loaders collect and raise before any house starts.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from flowcast.flow.spec import Where


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """A ``did you mean 'x'?`` hint, or '' when nothing is close."""
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else ""


class FlowError(Exception):
    """One error in a flow script, located."""

    def __init__(self, message: str, where: Where | None = None, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.where = where
        self.hint = hint

    def __str__(self) -> str:
        if self.where is None:
            text = f"error: {self.message}"
        else:
            w = self.where
            text = f"{w.file}:{w.line}:{w.col}: error: {self.message}"
            if w.text:
                line = w.text.rstrip("\n").expandtabs(1)
                text += f"\n    {line}\n    {' ' * max(0, w.col - 1)}^"
        if self.hint:
            text += f"\n  {self.hint}"
        return text


class FlowErrors(FlowError):
    """Several errors found in one pass; ``str`` lists them all."""

    def __init__(self, errors: list[FlowError]) -> None:
        self.errors = errors
        first = errors[0]
        super().__init__(first.message, first.where, first.hint)

    def __str__(self) -> str:
        return "\n".join(str(e) for e in self.errors)
