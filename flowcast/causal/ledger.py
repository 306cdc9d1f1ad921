"""The causal layer's own durable record: what each mailbox delivered, and the evidence kept.

Why delivered hashes are written before a delivery is pushed: a house that
restarts rebuilds its mailboxes by offering Local Storage again, and only
this record stops it from delivering a message twice.  One transaction per
turn (one fsync for everything delivered in it), as CAST's inbox does.

Why evidence copies the wire bytes: the CAST cache expires messages after
its retention, and proof of a publisher's misbehaviour (a signed message
the application refused, two messages claiming one place in a chain) is
worth keeping longer than the traffic.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from flowcast.cast.sqlitestore import open_store
from flowcast.errors import Error

__all__ = ["Ledger", "LedgerCorrupt"]

_FORMAT = "flowcast-causal-1"
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT)",
    "CREATE TABLE IF NOT EXISTS delivered(sub TEXT NOT NULL, epoch INTEGER NOT NULL, hash BLOB NOT NULL,"
    " PRIMARY KEY(sub, hash)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS evidence(hash BLOB NOT NULL, kind TEXT NOT NULL, topic TEXT NOT NULL,"
    " publisher BLOB NOT NULL, reason TEXT NOT NULL, other BLOB, stamp REAL NOT NULL, wire BLOB NOT NULL,"
    " PRIMARY KEY(hash, kind)) WITHOUT ROWID",
)


class LedgerCorrupt(Error):
    """A causal ledger file that cannot be read: the house refuses to start rather than deliver twice."""


class Ledger:
    """Delivered hashes per subscription and epoch, and evidence, in ``path``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.db = open_store(self.path, _SCHEMA, _FORMAT, "causal ledger", LedgerCorrupt)

    def delivered(self, sub: str) -> dict[int, list[bytes]]:
        """epoch -> the hashes ``sub`` delivered."""
        out: dict[int, list[bytes]] = {}
        for epoch, digest in self.db.execute("SELECT epoch, hash FROM delivered WHERE sub=?", (sub,)):
            out.setdefault(int(epoch), []).append(bytes(digest))
        return out

    def commit(self, rows: Iterable[tuple[str, int, bytes]]) -> None:
        """Record (sub, epoch, hash) rows in one durable transaction."""
        db = self.db
        try:
            db.execute("BEGIN")
            db.executemany("INSERT OR IGNORE INTO delivered VALUES(?, ?, ?)", rows)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def forget(self, sub: str, before_epoch: int) -> int:
        """Prune ``sub``'s delivered hashes of epochs before ``before_epoch`` (closed ones)."""
        return self.db.execute("DELETE FROM delivered WHERE sub=? AND epoch<?", (sub, before_epoch)).rowcount

    def keep(self, digest: bytes, kind: str, topic: str, publisher: bytes, reason: str, other: bytes | None,
             stamp: float, wire: bytes) -> bool:
        """Keep evidence (once per hash and kind); True if it is new."""
        try:
            cursor = self.db.execute("INSERT OR IGNORE INTO evidence VALUES(?, ?, ?, ?, ?, ?, ?, ?)",
                                     (digest, kind, topic, publisher, reason[:500], other, stamp, wire))
        except sqlite3.Error:
            return False
        return cursor.rowcount == 1

    def evidence(self, topic: str | None = None, limit: int = 1000) -> list[dict]:
        sql = "SELECT hash, kind, topic, publisher, reason, other, stamp, wire FROM evidence"
        args: tuple = ()
        if topic is not None:
            sql += " WHERE topic=?"
            args = (topic,)
        rows = self.db.execute(sql + " ORDER BY stamp LIMIT ?", (*args, limit)).fetchall()
        return [
            {"hash": bytes(h), "kind": k, "topic": t, "publisher": bytes(p), "reason": r,
             "other": bytes(o) if o is not None else None, "stamp": s, "wire": bytes(w)}
            for h, k, t, p, r, o, s, w in rows
        ]

    def expire_evidence(self, before: float) -> int:
        return self.db.execute("DELETE FROM evidence WHERE stamp<?", (before,)).rowcount

    def close(self) -> None:
        self.db.close()
