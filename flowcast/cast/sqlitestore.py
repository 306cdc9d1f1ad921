"""Opening one of CAST's small durable SQLite stores (a subscriber's inbox, a house's contacts).

Both want the same thing: WAL and ``synchronous=FULL`` (what they record is
promised to survive a power cut), their schema, and a format mark checked
on every open -- a file of another format, or one SQLite cannot read, is
refused with the store's own error, never replaced by an empty one.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable
from pathlib import Path

__all__ = ["open_store"]


def open_store(path: str | os.PathLike[str], schema: Iterable[str], fmt: str, what: str, error: type[Exception]) -> sqlite3.Connection:
    """The connection to the store at ``path`` (made with ``schema`` if new); ``error`` if it is not one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        for statement in schema:
            db.execute(statement)
        found = db.execute("SELECT value FROM meta WHERE key='format'").fetchone()
        if found is None:
            db.execute("INSERT INTO meta VALUES('format', ?)", (fmt,))
        elif found[0] != fmt:
            raise error(f"{path}: {what} format {found[0]!r}, this flowcast reads {fmt!r}")
    except sqlite3.DatabaseError as db_error:
        raise error(f"{path}: not a readable {what} ({db_error}); move it away to start afresh") from None
    return db
