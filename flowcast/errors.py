"""The root of flowcast's exceptions.

One ``except flowcast.Error`` catches whatever flowcast raises on purpose,
whichever layer raised it.  Each subclass keeps the builtin base it always
had (``class RouteError(ValueError, Error)``), so code that caught
``ValueError`` or ``OSError`` before still does.  This module imports
nothing from flowcast: every layer, the runtime included, can import it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["ClosedError", "DamagedFile", "Error", "damaged_cause", "did_you_mean"]


class Error(Exception):
    """Base of every public flowcast exception."""


class ClosedError(Error):
    """The stack (road or lane) was closed: it sends nothing more.

    Raised at once by a send after close, instead of returning a message
    that can never complete; not a ValueError, so it is never mistaken for
    bad input.
    """


class DamagedFile(Error):
    """A durable file that is present but cannot be taken for what it should be.

    An empty or unreadable store, one of another format, a cache that lost
    committed messages: each is refused and left byte for byte as it was,
    never replaced by a new, empty one (that would silently deliver twice or
    lose what was acknowledged).  One base so that every place a house starts
    can say it in one line and exit with one status (3), whichever store it
    was; ``path`` is the file, and the message names it.
    """

    def __init__(self, message: str, path: object = None) -> None:
        super().__init__(message)
        self.path = path


def damaged_cause(error: BaseException | None) -> DamagedFile | None:
    """The :class:`DamagedFile` ``error`` is or was raised from, if any.

    A store is often opened deep inside something else (a behaviour built
    with its flow, a micro-thread): what says "this file is damaged" must
    not be lost in what wrapped it.  Bounded: a chain is short, a cycle ends.
    """
    seen = 0
    while error is not None and seen < 32:
        if isinstance(error, DamagedFile):
            return error
        error = error.__cause__ or error.__context__
        seen += 1
    return None


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """A ``did you mean 'x'?`` hint, or '' when nothing is close.

    Here, at the bottom, so every layer words a near miss the same way: the
    behaviour registry (below the flow layer) as much as flows and layouts.
    """
    close = closest(name, candidates)
    return f"did you mean {close!r}?" if close is not None else ""


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate nearest ``name``, if any is near enough to be what was meant."""
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return close[0] if close else None
