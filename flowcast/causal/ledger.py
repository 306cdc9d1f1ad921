"""The causal layer's own durable record: what each mailbox delivered, and the evidence kept.

Why delivered hashes are written before a delivery is pushed: a house that
restarts rebuilds its mailboxes by offering Local Storage again, and only
this record stops it from delivering a message twice.  One transaction per
turn (one fsync for everything delivered in it), as CAST's inbox does.

Why a delivery stays *owed* until the flow acknowledges it: the delivered
hash is committed before the message is pushed into an in-memory queue
share, so a house killed before its flow took it would have lost it (the
mailbox counts it delivered, so its successors go on).  The ``owed`` table
keeps, per subscription and in delivery order (a causal order), the hash
and the cache seq of each delivery not yet acknowledged; a restarted
subscription hands exactly those over again, first.  The bytes stay in
Local Storage: a seq suffices unless the cache's retention expired it
while it was owed, which the broker reports (``abandoned``), never hides.
Acknowledgements commit with ``synchronous=NORMAL``: in WAL mode a killed
process never loses a commit, and a power cut only redelivers.

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
from flowcast.errors import DamagedFile

__all__ = ["Ledger", "LedgerCorrupt", "Owed"]

#: A row of ``owed`` as read back: (hash, epoch, cache seq), in delivery order.
Owed = tuple[bytes, int, int]

_FORMAT = "flowcast-causal-1"
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT)",
    "CREATE TABLE IF NOT EXISTS delivered(sub TEXT NOT NULL, epoch INTEGER NOT NULL, hash BLOB NOT NULL,"
    " PRIMARY KEY(sub, hash)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS evidence(hash BLOB NOT NULL, kind TEXT NOT NULL, topic TEXT NOT NULL,"
    " publisher BLOB NOT NULL, reason TEXT NOT NULL, other BLOB, stamp REAL NOT NULL, wire BLOB NOT NULL,"
    " PRIMARY KEY(hash, kind)) WITHOUT ROWID",
    # delivered to the flow and not acknowledged: n is the delivery order across the ledger, seq the cache's
    "CREATE TABLE IF NOT EXISTS owed(sub TEXT NOT NULL, hash BLOB NOT NULL, n INTEGER NOT NULL, epoch INTEGER NOT NULL,"
    " seq INTEGER NOT NULL, PRIMARY KEY(sub, hash)) WITHOUT ROWID",
    # per topic: the current epoch, the newest closed one (-1: none), the current epoch's genesis id
    "CREATE TABLE IF NOT EXISTS epochs(topic TEXT PRIMARY KEY, current INTEGER NOT NULL, closed INTEGER NOT NULL,"
    " genesis_publisher BLOB, genesis_hash BLOB, genesis_hsig BLOB)",
)


class LedgerCorrupt(DamagedFile):
    """A causal ledger file that cannot be read: the house refuses to start rather than deliver twice."""


class Ledger:
    """Delivered hashes per subscription and epoch, and evidence, in ``path``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.db = open_store(self.path, _SCHEMA, _FORMAT, "causal ledger", LedgerCorrupt)

    #: the newest delivery order given to an owed row (None: not read from the file yet)
    _owed_n: int | None = None

    def delivered(self, sub: str) -> dict[int, list[bytes]]:
        """epoch -> the hashes ``sub`` delivered."""
        out: dict[int, list[bytes]] = {}
        for epoch, digest in self.db.execute("SELECT epoch, hash FROM delivered WHERE sub=?", (sub,)):
            out.setdefault(int(epoch), []).append(bytes(digest))
        return out

    def commit(self, rows: Iterable[tuple[str, int, bytes]], owed: Iterable[tuple[str, int, bytes, int]] = ()) -> None:
        """Record (sub, epoch, hash) rows, and the (sub, epoch, hash, seq) now owed to the flow, in that
        order, in one durable transaction."""
        db = self.db
        try:
            db.execute("BEGIN")
            db.executemany("INSERT OR IGNORE INTO delivered VALUES(?, ?, ?)", rows)
            owed = list(owed)
            if owed:
                if self._owed_n is None:  # once per open: the newest delivery order recorded
                    self._owed_n = int(db.execute("SELECT coalesce(max(n), 0) FROM owed").fetchone()[0])
                n, self._owed_n = self._owed_n, self._owed_n + len(owed)
                db.executemany("INSERT OR REPLACE INTO owed VALUES(?, ?, ?, ?, ?)",
                               [(sub, digest, n + i, epoch, seq) for i, (sub, epoch, digest, seq) in enumerate(owed, 1)])
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def undeliver(self, sub: str, hashes: Iterable[bytes]) -> None:
        """Un-record deliveries that were never handed over (delivered and owed), in one transaction."""
        db = self.db
        rows = [(sub, h) for h in hashes]
        try:
            db.execute("BEGIN")
            db.executemany("DELETE FROM delivered WHERE sub=? AND hash=?", rows)
            db.executemany("DELETE FROM owed WHERE sub=? AND hash=?", rows)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def owed(self, sub: str) -> list[Owed]:
        """What ``sub`` handed to its flow and the flow never acknowledged: (hash, epoch, seq), in delivery order."""
        rows = self.db.execute("SELECT hash, epoch, seq FROM owed WHERE sub=? ORDER BY n", (sub,)).fetchall()
        return [(bytes(digest), int(epoch), int(seq)) for digest, epoch, seq in rows]

    def acknowledge(self, rows: Iterable[tuple[str, bytes]]) -> None:
        """The flow is done with these (sub, hash): no longer owed.  Without an fsync (the module says why)."""
        db = self.db
        db.execute("PRAGMA synchronous=NORMAL")
        try:
            db.execute("BEGIN")
            try:
                db.executemany("DELETE FROM owed WHERE sub=? AND hash=?", rows)
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        finally:
            db.execute("PRAGMA synchronous=FULL")

    def forget(self, sub: str, before_epoch: int) -> int:
        """Prune ``sub``'s delivered hashes of epochs before ``before_epoch`` (closed ones)."""
        return self.db.execute("DELETE FROM delivered WHERE sub=? AND epoch<?", (sub, before_epoch)).rowcount

    def epochs(self) -> dict[str, tuple[int, int, tuple[bytes, bytes, bytes] | None]]:
        """topic -> (current epoch, newest closed epoch or -1, the current genesis' (publisher, hash, hsig) or None).

        Why kept here and not only inferred from the cache: the cache expires a genesis after its
        retention while its epoch may last longer, and a closed epoch's delivered set is pruned, so
        a restart that reopened it would deliver its messages again.
        """
        out = {}
        for topic, current, closed, pub, digest, hsig in self.db.execute(
                "SELECT topic, current, closed, genesis_publisher, genesis_hash, genesis_hsig FROM epochs"):
            genesis = (bytes(pub), bytes(digest), bytes(hsig)) if digest is not None else None
            out[topic] = (int(current), int(closed), genesis)
        return out

    def opened(self, topic: str, epoch: int, genesis: tuple[bytes, bytes, bytes]) -> None:
        self.db.execute("INSERT INTO epochs VALUES(?, ?, -1, ?, ?, ?) ON CONFLICT(topic) DO UPDATE SET current=excluded.current,"
                        " genesis_publisher=excluded.genesis_publisher, genesis_hash=excluded.genesis_hash,"
                        " genesis_hsig=excluded.genesis_hsig WHERE excluded.current > epochs.current"
                        " OR (excluded.current = epochs.current AND epochs.genesis_hash IS NULL)", (topic, epoch, *genesis))

    def closed(self, topic: str, epoch: int) -> None:
        self.db.execute("INSERT INTO epochs VALUES(?, ?, ?, NULL, NULL, NULL) ON CONFLICT(topic) DO UPDATE SET"
                        " closed=max(epochs.closed, excluded.closed)", (topic, epoch + 1, epoch))

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
