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
    __slots__ = (
        "name", "_fields", "stamp", "version", "history", "_now", "watchers", "_packed",
        "queue", "bound", "dropped", "budget", "budget_declared", "_sizes", "_bytes", "dropped_bytes", "dropped_budget",
    )

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
        self._packed: tuple[int, int, bytes | None] | None = None  # (version, size, bytes): see encoded()

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

    def encoded(self, pack: Callable[[dict[str, Any]], bytes], limit: int = 0) -> tuple[int, bytes | None]:
        """The fields as ``pack`` makes them, and their length: packed once per change, not once per ask.

        A read of a share answers its fields; packing a large value again for
        every read made each read cost its whole size in CPU, so the packing
        is kept until the share next changes (its ``version`` moves).  Over
        ``limit`` bytes (0: none) only the length is kept and the bytes are
        None: a share too big to send is not held twice in memory either.
        One encoding is kept, so a store's reads use one ``pack``.  A value
        changed in place, without an update, is not seen until the next
        update: what a read answers is the share as last updated.
        """
        memo = self._packed
        if memo is not None and memo[0] == self.version and (memo[2] is not None or not limit or memo[1] > limit):
            return memo[1], memo[2]
        data = pack(self._fields)
        size = len(data)
        kept = data if not limit or size <= limit else None
        self._packed = (self.version, size, kept)
        return size, kept

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
        if field not in self._fields:
            self._fields[field] = value
            self._packed = None  # not a change, but the fields a read packs are others now

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
    producer into counted drops instead of unbounded memory.  A count alone
    does not bound memory (10,000 messages of 1 MiB are 10 GiB), so a queue
    has a byte ``budget`` too (declared, or its store's default): the bytes
    a message took on the wire, which a router knows for free, summed over
    what the queue holds.  What does not fit is the newest message, and it
    is the one refused: what is queued was promised to a reader already,
    and its sender hears of the refusal while it can still do something.

    Readers take messages straight off ``queue`` (``popleft``, ``clear``),
    so the bytes they free are settled lazily, at the next push: the sizes
    sit in a second deque in step with the first, and whatever the queue
    lost since, it lost from its head.
    """

    __slots__ = ()

    def __init__(
        self, name: str, now: Callable[[], float], bound: int = 0, history: int = 0, budget: int | None = None
    ) -> None:
        super().__init__(name, now, history=history)
        self._become_queue(bound, budget)

    def _become_queue(self, bound: int, budget: int | None = None) -> None:
        self.queue: deque[Any] = deque()
        self.bound = bound
        self.dropped = 0
        self.budget = 0
        #: The budget was declared (by a flow, a layer), not the store's default: another default does not replace it.
        self.budget_declared = False
        self._sizes: deque[int] = deque()
        self._bytes = 0
        self.dropped_budget = 0  # of the drops, the messages the byte budget refused
        self.dropped_bytes = 0  # and their bytes
        self._fields["value"] = self.queue
        if budget is not None:
            self.set_budget(budget)

    def set_budget(self, budget: int, *, default: bool = False) -> None:
        """Hold at most ``budget`` bytes (0: no byte budget).

        A declared budget replaces the store's ``default`` one (which only
        stands in until something says what the queue is for); a second
        declaration may only tighten the first; a default never replaces a
        declaration.
        """
        if budget.__class__ is not int or budget < 0:
            raise ValueError(f"queue share {self.name!r}: budget must be a whole number of bytes >= 0, not {budget!r}")
        if default:
            if self.budget_declared:
                return
        elif self.budget_declared and (not budget or (self.budget and budget >= self.budget)):
            return
        else:
            self.budget_declared = True
        if budget == self.budget:
            return
        if not budget:  # sizes are kept only under a budget
            self._sizes = deque()
            self._bytes = 0
        elif not self.budget:  # messages already queued were not sized: they count 0
            self._sizes = deque([0] * len(self.queue))
            self._bytes = 0
        self.budget = budget

    @property
    def held_bytes(self) -> int:
        """Bytes of the messages the queue holds now (sized ones: see ``push``)."""
        return self._settle()

    def _settle(self) -> int:
        sizes = self._sizes
        gone = len(sizes) - len(self.queue)
        if gone:
            if gone < 0:  # appended to ``queue`` directly, not pushed: unsized
                sizes.extend([0] * -gone)
            elif gone == len(sizes):
                sizes.clear()
                self._bytes = 0
            else:
                popleft = sizes.popleft
                total = self._bytes
                for _ in range(gone):
                    total -= popleft()
                self._bytes = total
        return self._bytes

    def update(self, data: Mapping[str, Any] | Iterable[tuple[str, Any]] = (), **fields: Any) -> None:
        """Other fields as on any share; ``value`` is the queue itself and stays it."""
        changes = dict(data)
        changes.update(fields)
        if "value" in changes:
            raise TypeError(f"queue share {self.name!r}: add messages with push(), not by setting its value")
        super().update(changes)

    def push(self, message: Any, size: int = 0) -> bool:
        """Append; False (and counted) when the queue is at its bound or the
        message's ``size`` bytes would take it over its budget.

        ``size`` is what the message cost to carry (a router passes the
        parcel's length); 0 counts toward the bound only.
        """
        if self.bound and len(self.queue) >= self.bound:
            self.dropped += 1
            return False
        if self.budget:
            # _settle inlined for the usual case (nothing taken since the last push)
            held = self._settle() if len(self._sizes) != len(self.queue) else self._bytes
            if held + size > self.budget:
                self.dropped += 1
                self.dropped_budget += 1
                self.dropped_bytes += size
                return False
            self._sizes.append(size)
            self._bytes = held + size
        self.queue.append(message)
        stamp = self._now()
        self.stamp = stamp
        self.version += 1
        if self.history is not None:
            self.history.append((stamp, {"value": message}))
        for watcher in self.watchers:
            watcher(self)
        return True

    def full(self, size: int = 0) -> str:
        """Why a push of ``size`` bytes would be refused now, for an error report."""
        if self.bound and len(self.queue) >= self.bound:
            return f"queue {self.name!r} is full ({len(self.queue)} of {self.bound} messages)"
        if self.budget:
            return f"queue {self.name!r} is full ({self._settle()} of {self.budget} bytes held, a {size}-byte message does not fit)"
        return f"queue {self.name!r} is full"

    def take(self) -> tuple[Any, int | None]:
        """The oldest message and the bytes it was counted at (None: pushed without a size, or
        no budget to count it); IndexError when empty.  What moves a message on to another
        queue uses it, so the size it came with is charged there too."""
        if not self.budget:
            return self.queue.popleft(), None
        self._settle()
        message = self.queue.popleft()
        size = self._sizes.popleft()
        self._bytes -= size
        return message, size or None

    def pop(self) -> Any:
        """The oldest message; IndexError when empty."""
        return self.queue.popleft()

    def drain(self) -> list[Any]:
        items = list(self.queue)
        self.queue.clear()
        return items
