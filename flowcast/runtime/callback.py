"""What the scheduler raises when a timer, reader or writer callback fails.

A micro-thread that raises is reported by name (:class:`MicroThreadError`).
A callback has no thread and no name of its own, and before this an
exception from one escaped ``Scheduler.run`` bare: the traceback showed the
scheduler's loop, not which of a house's many timers or sockets broke.  The
error names the callback by its qualified name, and a reader or writer by
the file descriptor it watches, so the report says what failed and where.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from flowcast.errors import Error

__all__ = ["CallbackError", "callback_name"]


def callback_name(callback: Callable[..., Any]) -> str:
    """The qualified name a person would look for in the source.

    Bound methods give ``Class.method``, closures ``outer.<locals>.inner``;
    a ``functools.partial`` is named by what it wraps, and a callable object
    by its class, since neither has a ``__qualname__`` of its own.
    """
    if isinstance(callback, functools.partial):
        return f"partial({callback_name(callback.func)})"
    name = getattr(callback, "__qualname__", None)
    if isinstance(name, str):
        return name
    return type(callback).__qualname__


class CallbackError(RuntimeError, Error):
    """A scheduler callback raised; the original exception is the ``__cause__``.

    ``role`` is ``"timer"``, ``"reader"`` or ``"writer"``; ``fd`` is the
    watched file descriptor for a reader or writer, None for a timer.
    """

    def __init__(
        self,
        role: str,
        callback: Callable[..., Any],
        error: BaseException,
        fd: int | None = None,
    ) -> None:
        self.role = role
        self.callback = callback
        self.name = callback_name(callback)
        self.error = error
        self.fd = fd
        on = f" on fd {fd}" if fd is not None else ""
        super().__init__(f"{role} callback {self.name}{on} failed: {error!r}")
