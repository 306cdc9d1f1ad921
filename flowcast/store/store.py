"""The Store: a house's shares by dotted name.

Names are validated once, here, because shares are addressed from flow
scripts and (later) from the wire: a name is dot-separated identifiers and
nothing else, so a hostile name can never become anything but a key.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from flowcast.errors import Error
from flowcast.store.share import QueueShare, Share

__all__ = ["Store", "ShareNameError", "valid_share_name", "QUEUE_BYTES", "ERROR_QUEUE_BYTES", "is_error_queue"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
MAX_NAME = 255
#: Byte budget of a queue share nothing declared one for (a CAST subscription's queue, a queue a
#: flow only names): the stock ``queue`` behaviour's default, so every queue is bounded in bytes.
QUEUE_BYTES = 32 << 20
#: Byte budget of an error queue (``SHARE.error``) nothing declared one for.  Reports are a few
#: hundred bytes and ERROR_QUEUE_BOUND of them are kept; a report a policy let in can be as large
#: as any message, and 1,000 of those must not pin a gigabyte.
ERROR_QUEUE_BYTES = 1 << 20


def is_error_queue(name: str) -> bool:
    """Whether ``name`` is where the errors about another share land (``SHARE.error``)."""
    return name.endswith(".error")


class ShareNameError(ValueError, Error):
    """A share name that is not dot-separated identifiers."""


def valid_share_name(name: str) -> bool:
    return isinstance(name, str) and len(name) <= MAX_NAME and _NAME.fullmatch(name) is not None


class Store:
    """Named shares of one house, stamped by one clock."""

    def __init__(self, now: Callable[[], float] | None = None, name: str = "store") -> None:
        self.name = name
        self._now = now if now is not None else (lambda: 0.0)
        self._shares: dict[str, Share] = {}
        self._turn_ends: list[Callable[[], None]] = []
        #: The byte budgets queues get when none is declared (set_queue_defaults).
        self.queue_bytes = QUEUE_BYTES
        self.error_queue_bytes = ERROR_QUEUE_BYTES

    def set_queue_defaults(self, queue_bytes: int | None = None, error_queue_bytes: int | None = None) -> None:
        """Change the default byte budgets (a layout's ``shares:`` section), also for the queues that have them now.

        Queues whose budget was declared keep it; the others take the new default.
        """
        for value in (queue_bytes, error_queue_bytes):
            if value is not None and (value.__class__ is not int or value < 1):
                raise ValueError(f"a default queue budget is a whole number of bytes >= 1, not {value!r}")
        if queue_bytes is not None:
            self.queue_bytes = queue_bytes
        if error_queue_bytes is not None:
            self.error_queue_bytes = error_queue_bytes
        for key, share in self._shares.items():
            if isinstance(share, QueueShare) and not share.budget_declared:
                share.set_budget(self.default_budget(key), default=True)

    def default_budget(self, name: str) -> int:
        """The byte budget a queue called ``name`` gets when none is declared."""
        return self.error_queue_bytes if is_error_queue(name) else self.queue_bytes

    def on_turn_end(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when a turn of the house's flows ends (flowcast.store.handoff: acknowledgements)."""
        self._turn_ends.append(callback)

    def off_turn_end(self, callback: Callable[[], None]) -> None:
        if callback in self._turn_ends:
            self._turn_ends.remove(callback)

    def end_turn(self) -> None:
        """A turn ended: every behaviour that ran in it returned.  The house calls this after each tick;
        a house without framers (tools, tests) calls it where its own turn ends."""
        for callback in tuple(self._turn_ends):
            callback()

    @property
    def stamp(self) -> float:
        return self._now()

    @staticmethod
    def normalise(name: str) -> str:
        """Strip the leading dot of an absolute name and validate it."""
        bare = name[1:] if name.startswith(".") else name
        if not valid_share_name(bare):
            raise ShareNameError(f"invalid share name {name!r}: want dot-separated identifiers")
        return bare

    def share(self, name: str, fields: Mapping[str, Any] | None = None) -> Share:
        """The share called ``name``, created (empty or with ``fields``) if absent."""
        key = self.normalise(name)
        share = self._shares.get(key)
        if share is None:
            share = self._shares[key] = Share(key, self._stamp_now, fields)
        elif fields:
            share.create(fields)
        return share

    def queue(self, name: str, bound: int = 0, budget: int | None = None) -> QueueShare:
        """The queue share called ``name``, created if absent.

        ``bound`` is in messages (0: none), ``budget`` in bytes (QueueShare.push;
        0: none).  No ``budget`` is the store's default (:meth:`default_budget`),
        which a later declaration replaces: every queue is bounded in bytes
        unless someone says otherwise.

        A share a flow has only named so far (no fields, never updated, no
        watchers) becomes a queue in place, so everything already holding
        it -- a behaviour's ``from`` binding -- sees the queue.
        """
        key = self.normalise(name)
        share = self._shares.get(key)
        if share is None:
            share = self._shares[key] = QueueShare(key, self._stamp_now, bound)
        elif not isinstance(share, QueueShare):
            if share._fields or share.stamp is not None or share.watchers or share.history is not None:
                raise TypeError(f"share {key!r} already holds values and cannot become a queue")
            share.__class__ = QueueShare
            share._become_queue(bound)  # type: ignore[attr-defined]
        elif bound and (not share.bound or bound < share.bound):
            share.bound = bound  # declared twice: the tighter bound holds
        queue: QueueShare = share  # type: ignore[assignment]
        if budget is None:
            queue.set_budget(self.default_budget(key), default=True)
        else:
            queue.set_budget(budget)  # declared twice: likewise
        return queue

    def _stamp_now(self) -> float:
        return self._now()

    def get(self, name: str) -> Share | None:
        return self._shares.get(name[1:] if name.startswith(".") else name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name[1:] if name.startswith(".") else name) in self._shares

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._shares))

    def __len__(self) -> int:
        return len(self._shares)

    def items(self) -> list[tuple[str, Share]]:
        return sorted(self._shares.items())

    def dump(self) -> dict[str, dict[str, Any]]:
        """Every share's fields by name (queues as lists), for display and tests."""
        out: dict[str, dict[str, Any]] = {}
        for name, share in sorted(self._shares.items()):
            fields = share.fields()
            if isinstance(share, QueueShare):
                fields["value"] = list(share.queue)
            out[name] = fields
        return out
