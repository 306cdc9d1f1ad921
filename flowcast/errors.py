"""The root of flowcast's exceptions.

One ``except flowcast.Error`` catches whatever flowcast raises on purpose,
whichever layer raised it.  Each subclass keeps the builtin base it always
had (``class RouteError(ValueError, Error)``), so code that caught
``ValueError`` or ``OSError`` before still does.  This module imports
nothing from flowcast: every layer, the runtime included, can import it.
"""

from __future__ import annotations

__all__ = ["ClosedError", "Error"]


class Error(Exception):
    """Base of every public flowcast exception."""


class ClosedError(Error):
    """The stack (road or lane) was closed: it sends nothing more.

    Raised at once by a send after close, instead of returning a message
    that can never complete; not a ValueError, so it is never mistaken for
    bad input.
    """
