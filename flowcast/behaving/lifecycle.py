"""The optional lifecycle of a class behaviour: ``enter``, ``exit``, ``abort(exc)``.

Some behaviours hold something for exactly as long as their frame is
active -- a subscription lease, an open file, a claimed port.  A class
behaviour says so by defining any of three methods, which are wired to its
frame's contexts the way hio's ``Doer.do`` maps them onto a generator's
``try``/``except``/``finally``:

* ``enter()`` runs with the frame's enter acts, each time the frame is
  entered (in the order its ``do`` act was written among them);
* ``__call__()`` is the act itself, in whatever context it names;
* ``abort(exc)`` runs when ``enter`` or the act raises, with the original
  exception, before it propagates as a ``BehaviourFailure``;
* ``exit()`` runs once when the frame is left after an ``enter`` -- by a
  transition, ``bid stop``, a framer abort, or at once if ``enter`` itself
  raised (``finally``: also after ``abort``).

A behaviour that defines none of them is returned untouched: no wrapper,
no cost per tick.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Lifecycle", "lifecycle_of"]


class Lifecycle:
    """One instance's enter/call/exit/abort, with the 'entered' latch that
    makes ``exit`` run once per entry however the frame is left."""

    __slots__ = ("instance", "_enter", "_exit", "_abort", "entered")

    def __init__(self, instance: Any, enter: Any, exit: Any, abort: Any) -> None:
        self.instance = instance
        self._enter = enter
        self._exit = exit
        self._abort = abort
        self.entered = False

    def enter(self) -> None:
        self.entered = True
        if self._enter is None:
            return
        try:
            self._enter()
        except Exception as error:
            self.failed(error)
            self.exit()  # finally: the frame may never be left cleanly
            raise

    def call(self) -> Any:
        try:
            return self.instance()
        except Exception as error:
            self.failed(error)
            raise

    def failed(self, error: Exception) -> None:
        if self._abort is not None:
            self._abort(error)

    def exit(self) -> None:
        if not self.entered:
            return
        self.entered = False
        if self._exit is not None:
            self._exit()


def lifecycle_of(instance: Any) -> Lifecycle | None:
    """The instance's lifecycle, or None when it defines no hook."""
    hooks = [getattr(instance, name, None) for name in ("enter", "exit", "abort")]
    hooks = [hook if callable(hook) else None for hook in hooks]
    if all(hook is None for hook in hooks):
        return None
    return Lifecycle(instance, *hooks)
