"""Durable tables: a house's state that commits with the acknowledgement of what the flow consumed.

Why here, beside the inbox: "reserve stock for each order, confirm once"
needs the reservation and the acknowledgement of the order to happen
together or not at all.  They are in one SQLite file, so the turn that
took an order and wrote the stock commits both in one transaction
(``Inbox.settle``): after a kill -9 at any instant either the order is
acknowledged and the stock written, or neither, and the order is handed
over again.  The application needs no SQLite of its own and no dedupe of
its own for what it keeps here.

Writes are staged in memory during the turn and readable at once; the
turn's end commits them (Store.end_turn, after each skedder tick).  Keys
and values are anything msgpack packs; a value msgpack cannot pack is
refused when written, not at the commit.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import msgpack

__all__ = ["Table", "TableStore"]

_MISSING = object()


class TableStore(Protocol):
    """What a table reads its committed rows from (the inbox)."""

    def table_get(self, name: str, key: bytes) -> bytes | None: ...

    def table_rows(self, name: str) -> list[tuple[bytes, bytes]]: ...


def _pack(value: Any) -> bytes:
    try:
        return msgpack.packb(value, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as error:
        raise TypeError(f"a durable table holds what msgpack packs, not {type(value).__name__}: {error}") from None


def _unpack(raw: bytes) -> Any:
    return msgpack.unpackb(raw, raw=False, strict_map_key=False, use_list=True)


class Table:
    """One named durable table: a mapping whose changes commit at the end of the turn."""

    def __init__(self, name: str, store: TableStore) -> None:
        self.name = name
        self._store = store
        self._staged: dict[bytes, bytes | None] = {}  # packed key -> packed value, None: deleted

    def get(self, key: Any, default: Any = None) -> Any:
        packed = _pack(key)
        raw = self._staged[packed] if packed in self._staged else self._store.table_get(self.name, packed)
        return default if raw is None else _unpack(raw)

    def __getitem__(self, key: Any) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return self.get(key, _MISSING) is not _MISSING

    def __setitem__(self, key: Any, value: Any) -> None:
        self._staged[_pack(key)] = _pack(value)

    def __delitem__(self, key: Any) -> None:
        if key not in self:
            raise KeyError(key)
        self._staged[_pack(key)] = None

    def items(self) -> Iterator[tuple[Any, Any]]:
        """Every key and value, committed and staged, in key-bytes order."""
        rows = dict(self._store.table_rows(self.name))
        rows.update(self._staged)
        for packed in sorted(rows):
            raw = rows[packed]
            if raw is not None:
                yield _unpack(packed), _unpack(raw)

    def __iter__(self) -> Iterator[Any]:
        return (key for key, _value in self.items())

    def __len__(self) -> int:
        return sum(1 for _ in self.items())

    def staged(self) -> list[tuple[str, bytes, bytes | None]]:
        """The turn's changes as ``(table, key, value)`` rows, and forget them (the caller commits them)."""
        rows = [(self.name, key, value) for key, value in self._staged.items()]
        self._staged = {}
        return rows

    def restage(self, key: bytes, value: bytes | None) -> None:
        """Put back a change whose commit failed, unless a later one replaced it."""
        self._staged.setdefault(key, value)

    def __repr__(self) -> str:
        return f"<Table {self.name!r}>"
