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

__all__ = ["Store", "ShareNameError", "valid_share_name"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
MAX_NAME = 255


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

    def queue(self, name: str, bound: int = 0, budget: int = 0) -> QueueShare:
        """The queue share called ``name``, created if absent.

        ``bound`` is in messages, ``budget`` in bytes (QueueShare.push); 0 is none.

        A share a flow has only named so far (no fields, never updated, no
        watchers) becomes a queue in place, so everything already holding
        it -- a behaviour's ``from`` binding -- sees the queue.
        """
        key = self.normalise(name)
        share = self._shares.get(key)
        if share is None:
            share = self._shares[key] = QueueShare(key, self._stamp_now, bound, budget=budget)
        elif not isinstance(share, QueueShare):
            if share._fields or share.stamp is not None or share.watchers or share.history is not None:
                raise TypeError(f"share {key!r} already holds values and cannot become a queue")
            share.__class__ = QueueShare
            share._become_queue(bound, budget)
        else:
            if bound and (not share.bound or bound < share.bound):
                share.bound = bound  # declared twice: the tighter bound holds
            share.set_budget(budget)  # likewise
        return share  # type: ignore[return-value]

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
