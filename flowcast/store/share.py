"""Shares: the named, stamped values behaviours communicate through.

A share holds named fields (``value`` unless told otherwise) and the clock
stamp of its last change.  Shares marked for logging keep a bounded history
of ``(stamp, fields)`` so the export layer can write it out; queue shares
carry message streams between behaviours (and, later, routers) in arrival
order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

__all__ = ["Share", "QueueShare"]


class Share:
    """A named record of fields with the stamp of its last update.

    The stamp comes from the store's clock at the moment of the update, so a
    share's age is known without the writer saying anything.
    """

    # A QueueShare's slots live here too, so a pristine share can become a
    # queue in place (see Store.queue): a flow names a share before the
    # behaviour that declares it a queue is built.
    __slots__ = ("name", "_fields", "stamp", "version", "history", "_now", "watchers", "queue", "bound", "dropped")

    def __init__(
        self,
        name: str,
        now: Callable[[], float],
        fields: Mapping[str, Any] | None = None,
        history: int = 0,
    ) -> None:
        self.name = name
        self._now = now
        self._fields: dict[str, Any] = dict(fields) if fields else {}
        self.stamp: float | None = now() if fields else None
        #: Counts updates: two in one tick share a stamp, never a version.
        self.version = 1 if fields else 0
        self.history: deque[tuple[float, dict[str, Any]]] | None = deque(maxlen=history) if history else None
        self.watchers: list[Callable[[Share], None]] = []

    # -- reading ---------------------------------------------------------

    @property
    def value(self) -> Any:
        return self._fields.get("value")

    @value.setter
    def value(self, value: Any) -> None:
        self.update(value=value)

    def __getitem__(self, field: str) -> Any:
        return self._fields[field]

    def get(self, field: str, default: Any = None) -> Any:
        return self._fields.get(field, default)

    def __contains__(self, field: object) -> bool:
        return field in self._fields

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __bool__(self) -> bool:  # a share exists even when empty
        return True

    def fields(self) -> dict[str, Any]:
        """A copy of the fields; changing it does not change the share."""
        return dict(self._fields)

    def keys(self) -> list[str]:
        return list(self._fields)

    # -- writing ---------------------------------------------------------

    def __setitem__(self, field: str, value: Any) -> None:
        self.update({field: value})

    def update(self, data: Mapping[str, Any] | Iterable[tuple[str, Any]] = (), **fields: Any) -> None:
        """Set fields, stamp the change, record history, tell watchers."""
        changes = dict(data)
        changes.update(fields)
        self._fields.update(changes)
        stamp = self._now()
        self.stamp = stamp
        self.version += 1
        if self.history is not None:
            self.history.append((stamp, dict(self._fields)))
        for watcher in self.watchers:
            watcher(self)

    def default(self, field: str, value: Any) -> None:
        """Give ``field`` a starting value if it has none -- not a change.

        Builders use this (as Ioflo's resolve step does) so a condition on a
        field nothing has written yet compares against 0.0, not a KeyError;
        it is not stamped, recorded or shown to watchers.
        """
        self._fields.setdefault(field, value)

    def create(self, data: Mapping[str, Any]) -> None:
        """Add fields that do not exist yet; existing fields keep their values."""
        missing = {k: v for k, v in data.items() if k not in self._fields}
        if missing:
            self.update(missing)

    def log(self, depth: int = 1024) -> None:
        """Keep the last ``depth`` changes from now on."""
        if self.history is None or self.history.maxlen != depth:
            self.history = deque(self.history or (), maxlen=depth)

    def __repr__(self) -> str:
        return f"Share({self.name!r}, {self._fields!r}, stamp={self.stamp!r})"


class QueueShare(Share):
    """A share whose ``value`` is a FIFO of messages.

    Writers ``push``; readers ``pop`` or drain.  A bound turns an unbounded
    producer into counted drops instead of unbounded memory.
    """

    __slots__ = ()

    def __init__(self, name: str, now: Callable[[], float], bound: int = 0, history: int = 0) -> None:
        super().__init__(name, now, history=history)
        self._become_queue(bound)

    def _become_queue(self, bound: int) -> None:
        self.queue: deque[Any] = deque()
        self.bound = bound
        self.dropped = 0
        self._fields["value"] = self.queue

    def update(self, data: Mapping[str, Any] | Iterable[tuple[str, Any]] = (), **fields: Any) -> None:
        """Other fields as on any share; ``value`` is the queue itself and stays it."""
        changes = dict(data)
        changes.update(fields)
        if "value" in changes:
            raise TypeError(f"queue share {self.name!r}: add messages with push(), not by setting its value")
        super().update(changes)

    def push(self, message: Any) -> bool:
        """Append; False (and counted) when the queue is at its bound."""
        if self.bound and len(self.queue) >= self.bound:
            self.dropped += 1
            return False
        self.queue.append(message)
        stamp = self._now()
        self.stamp = stamp
        self.version += 1
        if self.history is not None:
            self.history.append((stamp, {"value": message}))
        for watcher in self.watchers:
            watcher(self)
        return True

    def pop(self) -> Any:
        """The oldest message; IndexError when empty."""
        return self.queue.popleft()

    def drain(self) -> list[Any]:
        items = list(self.queue)
        self.queue.clear()
        return items
