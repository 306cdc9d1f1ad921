"""The subscriber's memory of what it delivered: per subscription a cursor, the ids within retention,
and what the flow has not acknowledged yet.

Exactly once to the application rests on this file, not on the network:
a message is handed over only if its id is new for its subscription, and
the cursor, the ids and the message itself (``owed``) are committed
(``synchronous=FULL``) before the message is pushed into the queue share.
It stays owed until the flow acknowledges it (flowcast.store.handoff), so
a house killed before its flow took it hands it over again when it starts.
A restart, a resync, an overlapping retry all come back to the same
answer.  A file that SQLite cannot read is refused, never replaced: an
empty inbox would deliver the whole cache again.

Why owed messages are packed, one row per subscription per commit: a row
per message cost ~5 us of CPU per message (insert, then delete when
acknowledged), half again the rest of a delivery; a pack costs one insert
per turn, and the usual in-order acknowledgement deletes whole packs and
moves a floor (``owedfloor``) through the one a turn took part of.
Acknowledgements out of order are noted one by one (``unowed``) until
their pack is all done.

Why acknowledgements commit without an fsync (``synchronous=NORMAL``):
in WAL mode a commit is in the OS once written, so a killed process never
loses it; only a power cut can take the newest acknowledgements, and
then those messages are handed over again, flagged redelivered -- never
lost.  Anything whose loss would be visible outside the house commits
with an fsync.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import msgpack

from flowcast.cast.sqlitestore import check_store, open_store
from flowcast.errors import DamagedFile

__all__ = ["Inbox", "InboxCorrupt", "Owed", "check_inbox"]

_FORMAT = "1"
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT)",
    "CREATE TABLE IF NOT EXISTS subs(sid BLOB PRIMARY KEY, key TEXT UNIQUE NOT NULL, cursor INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS seen(sid BLOB NOT NULL, id BLOB NOT NULL, until REAL NOT NULL, PRIMARY KEY(sid, id)) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS seen_until ON seen(until)",
    # handed to the flow, not yet acknowledged: a message (kind 'cast') or a gap notice ('cast.gap', seq..upto);
    # one row per message: what files written before ``owedpack`` hold (still read and acknowledged)
    "CREATE TABLE IF NOT EXISTS owed(sid BLOB NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, id BLOB, name TEXT,"
    " publisher TEXT, stamp REAL, data BLOB, upto INTEGER, PRIMARY KEY(sid, seq)) WITHOUT ROWID",
    # the same, one row per subscription per commit (seqs seq..upto, msgpack list of the rows' other columns)
    "CREATE TABLE IF NOT EXISTS owedpack(sid BLOB NOT NULL, seq INTEGER NOT NULL, upto INTEGER NOT NULL, items BLOB NOT NULL,"
    " PRIMARY KEY(sid, seq)) WITHOUT ROWID",
    # acknowledged one by one while their pack still owes others; and every seq up to ``upto`` acknowledged
    "CREATE TABLE IF NOT EXISTS unowed(sid BLOB NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY(sid, seq)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS owedfloor(sid BLOB PRIMARY KEY, upto INTEGER NOT NULL)",
    # durable tables (flowcast.cast.table): msgpack key and value, committed with the turn's acknowledgements
    "CREATE TABLE IF NOT EXISTS tables(name TEXT NOT NULL, key BLOB NOT NULL, value BLOB NOT NULL, PRIMARY KEY(name, key)) WITHOUT ROWID",
    # publishes a turn made (flowcast.cast.outbox), until the cache has them
    "CREATE TABLE IF NOT EXISTS outbox(id BLOB PRIMARY KEY, name TEXT NOT NULL, publisher TEXT NOT NULL,"
    " recipients TEXT NOT NULL, data BLOB NOT NULL, made INTEGER NOT NULL)",
)

#: A row of ``owed``: (sid, seq, kind, id, name, publisher, stamp, data, upto).
Owed = tuple[bytes, int, str, bytes | None, str | None, str | None, float | None, bytes | None, int | None]


class InboxCorrupt(DamagedFile):
    """An inbox file that cannot be read: the house refuses to start rather than deliver twice."""


def check_inbox(path: str | os.PathLike[str]) -> None:
    """Raise :class:`InboxCorrupt` unless ``path`` is an inbox; reads only (``flowcast cast ls`` beside a running house)."""
    check_store(Path(path), _FORMAT, "inbox", InboxCorrupt)


class Inbox:
    """Cursors and delivered ids, in ``path`` (``<estate dir>/cast/inbox.sqlite3``)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.db = open_store(self.path, _SCHEMA, _FORMAT, "inbox", InboxCorrupt)

    def find(self, key: str) -> tuple[bytes, int] | None:
        """The sid and cursor of the subscription known by ``key`` (estate, pattern, split, queue)."""
        row = self.db.execute("SELECT sid, cursor FROM subs WHERE key=?", (key,)).fetchone()
        return None if row is None else (bytes(row[0]), int(row[1]))

    def add(self, sid: bytes, key: str, cursor: int = 0) -> None:
        self.db.execute("INSERT OR REPLACE INTO subs VALUES(?, ?, ?)", (sid, key, cursor))

    def seen(self, sid: bytes, ids: list[bytes]) -> set[bytes]:
        """Which of ``ids`` were delivered already for ``sid``."""
        found: set[bytes] = set()
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows = self.db.execute(f"SELECT id FROM seen WHERE sid=? AND id IN ({marks})", (sid, *chunk))
            found.update(bytes(row[0]) for row in rows)
        return found

    def commit(self, sid: bytes, cursor: int, ids: Iterable[tuple[bytes, float]]) -> None:
        """Advance ``sid`` to ``cursor`` and remember ``ids`` (each until its time), durably, at once."""
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany("INSERT OR IGNORE INTO seen VALUES(?, ?, ?)", ((sid, id, until) for id, until in ids))
            db.execute("UPDATE subs SET cursor=? WHERE sid=?", (cursor, sid))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def commit_many(self, cursors: dict[bytes, int], rows: Iterable[tuple[bytes, bytes, float]],
                    owed: Iterable[Owed] = (), acks: Iterable[tuple[bytes, int]] = (), ranges: dict[bytes, int] | None = None) -> None:
        """Several subscriptions' cursors, ``(sid, id, until)`` rows and the messages now owed to the flow
        in one transaction: one fsync per turn.  ``acks`` and ``ranges`` (sid -> every seq up to it):
        acknowledgements riding with it (flowcast.cast.settle)."""
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            self._acknowledge(acks, ranges)
            db.executemany("INSERT OR IGNORE INTO seen VALUES(?, ?, ?)", rows)
            db.executemany("INSERT OR REPLACE INTO owedpack VALUES(?, ?, ?, ?)", _packs(owed))
            db.executemany("UPDATE subs SET cursor=? WHERE sid=?", [(cursor, sid) for sid, cursor in cursors.items()])
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def owed(self, sid: bytes) -> list[Owed]:
        """What ``sid`` handed to the flow and the flow never acknowledged, in seq order."""
        db = self.db
        rows: list[Owed] = [(bytes(r[0]), int(r[1]), r[2], None if r[3] is None else bytes(r[3]), r[4], r[5], r[6],
                             None if r[7] is None else bytes(r[7]), r[8])
                            for r in db.execute("SELECT * FROM owed WHERE sid=? ORDER BY seq", (sid,))]
        floor = self._floor(sid)
        done = {int(r[0]) for r in db.execute("SELECT seq FROM unowed WHERE sid=?", (sid,))}
        for (items,) in db.execute("SELECT items FROM owedpack WHERE sid=? ORDER BY seq", (sid,)):
            rows.extend(row for row in _unpack(sid, items) if row[1] > floor and row[1] not in done)
        rows.sort(key=lambda row: row[1])
        return rows

    def owed_count(self) -> int:
        sids = {bytes(r[0]) for r in self.db.execute("SELECT sid FROM owed UNION SELECT sid FROM owedpack")}
        return sum(len(self.owed(sid)) for sid in sids)

    def _floor(self, sid: bytes) -> int:
        row = self.db.execute("SELECT upto FROM owedfloor WHERE sid=?", (sid,)).fetchone()
        return -1 if row is None else int(row[0])

    def _acknowledge(self, acks: Iterable[tuple[bytes, int]], ranges: dict[bytes, int] | None) -> None:
        db = self.db
        acks = list(acks)
        if acks:
            db.executemany("DELETE FROM owed WHERE sid=? AND seq=?", acks)
            db.executemany("INSERT OR IGNORE INTO unowed VALUES(?, ?)", acks)
            spans: dict[bytes, tuple[int, int]] = {}
            for sid, seq in acks:
                low, high = spans.get(sid, (seq, seq))
                spans[sid] = (min(low, seq), max(high, seq))
            for sid, (low, high) in spans.items():
                self._sweep(sid, low, high)
        if ranges:
            items = list(ranges.items())
            db.executemany("DELETE FROM owed WHERE sid=? AND seq<=?", items)
            db.executemany("DELETE FROM owedpack WHERE sid=? AND upto<=?", items)
            db.executemany("DELETE FROM unowed WHERE sid=? AND seq<=?", items)
            db.executemany("INSERT INTO owedfloor VALUES(?, ?) ON CONFLICT(sid) DO UPDATE SET upto=max(upto, excluded.upto)", items)

    def _sweep(self, sid: bytes, low: int, high: int) -> None:
        """Delete the packs overlapping ``low..high`` that owe nothing any more (and their ``unowed`` notes)."""
        db = self.db
        packs = db.execute("SELECT seq, upto, items FROM owedpack WHERE sid=? AND seq<=? AND upto>=?", (sid, high, low)).fetchall()
        if not packs:
            return
        floor = self._floor(sid)
        for first, upto, items in packs:
            done = {int(r[0]) for r in db.execute("SELECT seq FROM unowed WHERE sid=? AND seq BETWEEN ? AND ?", (sid, first, upto))}
            if all(row[1] <= floor or row[1] in done for row in _unpack(sid, items)):
                db.execute("DELETE FROM owedpack WHERE sid=? AND seq=?", (sid, first))
                db.execute("DELETE FROM unowed WHERE sid=? AND seq BETWEEN ? AND ?", (sid, first, upto))

    def settle(self, acks: Iterable[tuple[bytes, int]], rows: list[tuple[str, bytes, bytes | None]] = (),
               publishes: list[tuple[bytes, str, str, str, bytes]] = (), published: list[bytes] = (),
               ranges: dict[bytes, int] | None = None) -> None:
        """One turn's end in one transaction: the ``(sid, seq)`` the flow is done with are no longer owed,
        the durable tables' ``(table, key, value)`` changes (None deletes) are written, the turn's
        ``publishes`` go into the outbox and the ``published`` ids (the cache has them) leave it.
        ``ranges``: sid -> every seq up to it, acknowledged in one statement.

        Acknowledgements alone commit without an fsync (the module's note);
        table changes and publishes with one, since the flow may act on them outside.
        """
        db = self.db
        fsync = bool(rows or publishes)
        if not fsync:
            db.execute("PRAGMA synchronous=NORMAL")
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                self._acknowledge(acks, ranges)
                db.executemany("DELETE FROM tables WHERE name=? AND key=?", [(n, k) for n, k, v in rows if v is None])
                db.executemany("INSERT OR REPLACE INTO tables VALUES(?, ?, ?)", [row for row in rows if row[2] is not None])
                db.executemany("INSERT OR IGNORE INTO outbox(id, name, publisher, recipients, data, made) VALUES(?, ?, ?, ?, ?,"
                               " (SELECT coalesce(max(made), 0) + 1 FROM outbox))", publishes)
                db.executemany("DELETE FROM outbox WHERE id=?", [(id,) for id in published])
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        finally:
            if not fsync:
                db.execute("PRAGMA synchronous=FULL")

    def outbox(self) -> list[tuple[bytes, str, str, str, bytes]]:
        """Publishes committed and not yet known to be in the cache, in the order they were made."""
        return [(bytes(r[0]), r[1], r[2], r[3], bytes(r[4]))
                for r in self.db.execute("SELECT id, name, publisher, recipients, data FROM outbox ORDER BY made")]

    def table_get(self, name: str, key: bytes) -> bytes | None:
        row = self.db.execute("SELECT value FROM tables WHERE name=? AND key=?", (name, key)).fetchone()
        return None if row is None else bytes(row[0])

    def table_rows(self, name: str) -> list[tuple[bytes, bytes]]:
        return [(bytes(k), bytes(v)) for k, v in self.db.execute("SELECT key, value FROM tables WHERE name=?", (name,))]

    def cursor(self, sid: bytes) -> int | None:
        row = self.db.execute("SELECT cursor FROM subs WHERE sid=?", (sid,)).fetchone()
        return None if row is None else int(row[0])

    def forget(self, now: float) -> int:
        """Drop ids whose retention (and its margin) passed: a repeat that old cannot be in any cache."""
        return self.db.execute("DELETE FROM seen WHERE until < ?", (now,)).rowcount

    def close(self) -> None:
        self.db.close()


def _packs(owed: Iterable[Owed]) -> Iterator[tuple[bytes, int, int, bytes]]:
    """``owed`` (in seq order per subscription) as one ``owedpack`` row per subscription."""
    by_sid: dict[bytes, list[list[object]]] = {}
    for row in owed:
        by_sid.setdefault(row[0], []).append(list(row[1:]))
    for sid, items in by_sid.items():
        yield sid, int(items[0][0]), int(items[-1][0]), msgpack.packb(items, use_bin_type=True)


def _unpack(sid: bytes, items: bytes) -> list[Owed]:
    return [(sid, *item) for item in msgpack.unpackb(items, raw=False)]  # type: ignore[misc]
