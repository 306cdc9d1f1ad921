"""The points where code outside a stack (or a router) hears what it does.

A stack has a few such points -- a message delivered, a message finished,
a remote's presence changed -- and more than one party wants each: the
router, an event recorder, a test, soon the pub/sub and causal layers.  A
slot holding one callback made each new party replace the last or chain
it by hand, and recording swapped methods into the instance.  Here every
point is a named hook with any number of listeners, in the way trio
instruments its run loop:

* **Nothing installed costs nothing.**  Each hook is an attribute that is
  None while no listener is installed, so the stack's per-message check is
  one attribute load, as the single slot was.  With one listener the
  attribute *is* that listener: a routed message passes several hooks at
  every house, and a wrapper call at each would cost more than the slot
  did.  So the owner calls it inside ``try`` and hands what it raised to
  :meth:`Hooks.failed` (free in CPython 3.11+ until something raises).
* **Listeners add up.**  ``add`` and ``remove`` leave the other listeners
  alone; they run in the order they were added.  An event goes to the
  listeners installed when it began: one removed by an earlier listener of
  the same event still hears that event, and none after it.
* **A listener that raises is logged and removed.**  A stack serves many
  parties; one party's bug must not stop the stack nor the other
  listeners.  (A listener that must survive its own errors catches them.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["Hooks", "HOOK_LOG"]

#: Where a listener that raised is reported.
HOOK_LOG = logging.getLogger("flowcast.hooks")

Listener = Callable[..., Any]


class Hooks:
    """Named hooks, each an attribute: None, or a callable that calls its listeners.

    ``names`` are fixed when the owner is made: a typo in ``add`` is an
    error at once, not a listener that never hears anything.  ``direct``
    (the default) makes a lone listener the attribute itself, for owners
    that guard their calls (see the module); ``direct=False`` guards every
    call here, for hooks off the hot path.
    """

    def __init__(
        self, names: Iterable[str], owner: str = "", *, direct: bool = True, changed: Callable[[str], None] | None = None
    ) -> None:
        self._owner = owner
        self._direct = direct
        self._changed = changed  # told the hook's name after its listeners change: an owner may cache the attribute
        self._listeners: dict[str, dict[Listener, None]] = {}
        for name in names:
            if not name.isidentifier() or name.startswith("_") or hasattr(Hooks, name):
                raise ValueError(f"bad hook name {name!r}")
            self._listeners[name] = {}
            setattr(self, name, None)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._listeners)

    def add(self, name: str, listener: Listener) -> None:
        """Call ``listener`` at hook ``name`` from now on (adding it twice is a ValueError)."""
        listeners = self._known(name)
        if not callable(listener):
            raise ValueError(f"listener for hook {name!r} is not callable")
        if listener in listeners:
            raise ValueError(f"listener {listener!r} is already installed on hook {name!r}")
        listeners[listener] = None
        self._rebuild(name)

    def remove(self, name: str, listener: Listener) -> None:
        """Stop calling ``listener`` at ``name``; KeyError if it is not installed there."""
        listeners = self._known(name)
        if listener not in listeners:
            raise KeyError(f"listener {listener!r} is not installed on hook {name!r}")
        del listeners[listener]
        self._rebuild(name)

    def discard(self, name: str, listener: Listener) -> None:
        """Like ``remove``, but nothing happens when it is not installed."""
        if listener in self._known(name):
            self.remove(name, listener)

    def listeners(self, name: str) -> tuple[Listener, ...]:
        return tuple(self._known(name))

    def _known(self, name: str) -> dict[Listener, None]:
        try:
            return self._listeners[name]
        except KeyError:
            raise ValueError(f"no hook {name!r} (hooks: {', '.join(self._listeners)})") from None

    def failed(self, name: str, call: Listener) -> None:
        """The owner's call of hook ``name`` (the attribute's value, ``call``) raised: log it and
        remove the listener.  Call from inside ``except Exception``."""
        if call in self._listeners[name]:  # the single listener itself (a fan-out never raises)
            self._failed(name, call)

    def _failed(self, name: str, listener: Listener) -> None:
        HOOK_LOG.exception("%slistener %r on hook %r raised; removed", f"{self._owner}: " if self._owner else "", listener, name)
        self.discard(name, listener)

    def _rebuild(self, name: str) -> None:
        """Set the hook's attribute: None, the one listener, or one callable calling them all."""
        listeners = tuple(self._listeners[name])
        failed = self._failed
        call: Listener | None
        if not listeners:
            call = None
        elif len(listeners) == 1 and self._direct:
            call = listeners[0]
        else:

            def call(*args: Any) -> None:
                for listener in listeners:
                    try:
                        listener(*args)
                    except Exception:  # noqa: BLE001
                        failed(name, listener)

        setattr(self, name, call)
        if self._changed is not None:
            self._changed(name)

    def __repr__(self) -> str:
        installed = {name: len(listeners) for name, listeners in self._listeners.items() if listeners}
        return f"<Hooks {self._owner} {installed}>"


class Replaced:
    """A removed single-listener slot (``on_message``...): says where its listeners go now.

    Without it, ``stack.on_message = f`` would quietly set an attribute
    nothing reads, and ``f`` would never be called.
    """

    def __init__(self, hook: str) -> None:
        self.hook = hook

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        raise AttributeError(f"{self.name} is gone: use .hooks.add({self.hook!r}, listener)")

    def __set__(self, obj: Any, value: Any) -> None:
        raise AttributeError(f"{self.name} is gone: use .hooks.add({self.hook!r}, listener)")
