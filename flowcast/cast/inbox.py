"""The subscriber's memory of what it delivered: per subscription a cursor, and the ids within retention.

Exactly once to the application rests on this file, not on the network:
a message is handed over only if its id is new for its subscription, and
the cursor and the ids are committed (``synchronous=FULL``) before the
messages are pushed into the queue share.  A restart, a resync, an
overlapping retry all come back to the same answer.  A file that SQLite
cannot read is refused, never replaced: an empty inbox would deliver the
whole cache again.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from flowcast.cast.sqlitestore import check_store, open_store
from flowcast.errors import DamagedFile

__all__ = ["Inbox", "InboxCorrupt", "check_inbox"]

_FORMAT = "1"
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT)",
    "CREATE TABLE IF NOT EXISTS subs(sid BLOB PRIMARY KEY, key TEXT UNIQUE NOT NULL, cursor INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS seen(sid BLOB NOT NULL, id BLOB NOT NULL, until REAL NOT NULL, PRIMARY KEY(sid, id)) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS seen_until ON seen(until)",
)


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

    def commit_many(self, cursors: dict[bytes, int], rows: Iterable[tuple[bytes, bytes, float]]) -> None:
        """Several subscriptions' cursors and ``(sid, id, until)`` rows in one transaction: one fsync per turn."""
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany("INSERT OR IGNORE INTO seen VALUES(?, ?, ?)", rows)
            db.executemany("UPDATE subs SET cursor=? WHERE sid=?", [(cursor, sid) for sid, cursor in cursors.items()])
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def cursor(self, sid: bytes) -> int | None:
        row = self.db.execute("SELECT cursor FROM subs WHERE sid=?", (sid,)).fetchone()
        return None if row is None else int(row[0])

    def forget(self, now: float) -> int:
        """Drop ids whose retention (and its margin) passed: a repeat that old cannot be in any cache."""
        return self.db.execute("DELETE FROM seen WHERE until < ?", (now,)).rowcount

    def close(self) -> None:
        self.db.close()
