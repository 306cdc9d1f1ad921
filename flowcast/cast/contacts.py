"""Who each local user has agreed to hear from, and what waits for that agreement.

Durable (SQLite, WAL, ``synchronous=FULL``) because both halves of the
promise outlive a restart: an accepted contact's keys are how content is
opened at all, and content from someone not yet accepted is *held* here,
never dropped and never shown, until the user accepts or refuses.

A contact is one row per (local user, peer address) in one state:

=========  ===================================================================
requested  the local user asked the peer; no keys of theirs yet
pending    the peer asked (their keys are here, verified); the user decides
accepted   both sides agreed; the peer's keys are the ones content opens with
refused    the user said no; the peer's content is refused, counted
=========  ===================================================================

A file SQLite cannot read is refused, never replaced: an empty store
would forget every acceptance and every held message.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from flowcast.cast.sqlitestore import open_store
from flowcast.errors import DamagedFile

__all__ = ["Contact", "Contacts", "ContactsCorrupt", "Held", "STATES"]

STATES = ("requested", "pending", "accepted", "refused")
_FORMAT = "1"
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT)",
    "CREATE TABLE IF NOT EXISTS contacts(user TEXT NOT NULL, peer TEXT NOT NULL, state TEXT NOT NULL,"
    " verify BLOB, box BLOB, stamp REAL NOT NULL, PRIMARY KEY(user, peer)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS held(n INTEGER PRIMARY KEY AUTOINCREMENT, user TEXT NOT NULL, peer TEXT NOT NULL,"
    " name TEXT NOT NULL, id BLOB NOT NULL, stamp REAL NOT NULL, data BLOB NOT NULL)",
    "CREATE INDEX IF NOT EXISTS held_peer ON held(user, peer, n)",
)


class ContactsCorrupt(DamagedFile):
    """A contacts file that cannot be read: the house refuses to start rather than forget acceptances."""


class Contact(NamedTuple):
    user: str
    peer: str
    state: str
    verify: bytes | None
    box: bytes | None
    stamp: float


class Held(NamedTuple):
    n: int
    user: str
    peer: str
    name: str
    id: bytes
    stamp: float
    data: bytes


class Contacts:
    """The contacts and held content of one house's users, in ``path`` (``<estate dir>/cast/contacts.sqlite3``)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.db = open_store(self.path, _SCHEMA, _FORMAT, "contacts store", ContactsCorrupt)

    def get(self, user: str, peer: str) -> Contact | None:
        row = self.db.execute("SELECT user, peer, state, verify, box, stamp FROM contacts WHERE user=? AND peer=?", (user, peer)).fetchone()
        return None if row is None else _contact(row)

    def put(self, user: str, peer: str, state: str, verify: bytes | None, box: bytes | None, stamp: float) -> None:
        if state not in STATES:
            raise ValueError(f"contact state {state!r} is not one of {STATES}")
        self.db.execute("INSERT OR REPLACE INTO contacts VALUES(?, ?, ?, ?, ?, ?)", (user, peer, state, verify, box, stamp))

    def list(self, user: str, state: str | None = None) -> list[Contact]:
        query = "SELECT user, peer, state, verify, box, stamp FROM contacts WHERE user=?"
        args: tuple = (user,)
        if state is not None:
            query += " AND state=?"
            args += (state,)
        return [_contact(row) for row in self.db.execute(query + " ORDER BY stamp, peer", args)]

    # -- held content ---------------------------------------------------------------------

    def hold(self, user: str, peer: str, name: str, id: bytes, stamp: float, data: bytes) -> None:
        self.db.execute("INSERT INTO held(user, peer, name, id, stamp, data) VALUES(?, ?, ?, ?, ?, ?)", (user, peer, name, id, stamp, data))

    def held(self, user: str, peer: str | None = None) -> list[Held]:
        """What waits for ``user`` to accept (``peer``'s only, if given), in the order it came."""
        query = "SELECT n, user, peer, name, id, stamp, data FROM held WHERE user=?"
        args: tuple = (user,)
        if peer is not None:
            query += " AND peer=?"
            args += (peer,)
        return [Held(int(r[0]), r[1], r[2], r[3], bytes(r[4]), float(r[5]), bytes(r[6])) for r in self.db.execute(query + " ORDER BY n", args)]

    def count_held(self, user: str, peer: str) -> int:
        return int(self.db.execute("SELECT count(*) FROM held WHERE user=? AND peer=?", (user, peer)).fetchone()[0])

    def release(self, user: str, peer: str, upto: int) -> int:
        """Forget held content of ``peer`` up to ``n`` once it was delivered (or refused with the peer)."""
        return self.db.execute("DELETE FROM held WHERE user=? AND peer=? AND n<=?", (user, peer, upto)).rowcount

    def close(self) -> None:
        self.db.close()


def _contact(row: tuple) -> Contact:
    verify = bytes(row[3]) if row[3] is not None else None
    box = bytes(row[4]) if row[4] is not None else None
    return Contact(row[0], row[1], row[2], verify, box, float(row[5]))
