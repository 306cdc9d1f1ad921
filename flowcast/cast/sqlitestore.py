"""Opening one of the small durable SQLite stores (a subscriber's inbox, a house's contacts, the causal ledger).

Each wants the same thing: WAL and ``synchronous=FULL`` (what they record is
promised to survive a power cut), their schema, and a format mark checked
on every open.  A file that is present but is not such a store is refused
with the store's own error (a :class:`~flowcast.errors.DamagedFile`) and
left byte for byte as it was:

* empty (0 bytes) -- SQLite itself would take it for a valid empty
  database, and an empty inbox delivers the whole cache a second time;
* without the ``meta`` table or its format row, or of another format;
* one SQLite cannot read.

Why the check runs on a read-only connection first: a read-write open
writes before anything can be checked (``journal_mode=WAL`` rewrites the
header of an empty file; the last connection to close checkpoints the WAL
into the file), so a refused file would no longer be the file that was
refused.  And why a new store is made under a temporary name and renamed
into place: a process killed half-way through creating one must not leave
a file without its format row, which the next start would -- rightly --
refuse as damaged.  Only a missing file becomes a new store.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from flowcast.runtime.durable import replace_durably

__all__ = ["open_store", "check_store", "read_only_uri"]


def _refusal(error: type[Exception], path: Path, what: str, why: str) -> Exception:
    return error(f"{path}: not a usable {what}: {why}; it was left as it is (move it away to start afresh)", path)


def read_only_uri(path: Path) -> str:
    """A URI that reads ``path`` without writing anything, beside it included.

    With no WAL to replay (none, or an empty one) the file is the whole
    store: ``immutable=1`` reads it without the ``-shm``/``-wal`` files a
    read-only open of a WAL database otherwise creates.  With a WAL (a
    writer killed mid-run) it must be read too: ``mode=ro``, which replays
    it in memory and never checkpoints.
    """
    wal = Path(f"{path}-wal")
    try:
        replay = wal.stat().st_size > 0
    except OSError:
        replay = False
    return f"{path.resolve().as_uri()}?{'mode=ro' if replay else 'immutable=1'}"


def check_store(path: Path, fmt: str, what: str, error: type[Exception]) -> None:
    """Raise ``error`` unless the file at ``path`` is a store of format ``fmt``; never writes to it."""
    try:
        size = path.stat().st_size
    except OSError as os_error:
        raise _refusal(error, path, what, f"it cannot be read ({os_error.strerror or os_error})") from None
    if not path.is_file():
        raise _refusal(error, path, what, "it is not a regular file")
    if size == 0:
        raise _refusal(error, path, what, "it is empty (0 bytes)")
    try:
        db = sqlite3.connect(read_only_uri(path), uri=True, isolation_level=None)
    except sqlite3.Error as db_error:
        raise _refusal(error, path, what, f"SQLite cannot open it ({db_error})") from None
    try:
        try:
            found = db.execute("SELECT value FROM meta WHERE key='format'").fetchone()
        except sqlite3.OperationalError as db_error:
            if "no such table" in str(db_error):
                raise _refusal(error, path, what, "it has no meta table (not such a store, or a damaged one)") from None
            raise
        if found is None:
            raise _refusal(error, path, what, "its meta table has no format row (a damaged store)")
        if found[0] != fmt:
            raise _refusal(error, path, what, f"its format is {found[0]!r}, this flowcast reads {fmt!r}")
    except sqlite3.DatabaseError as db_error:  # "file is not a database", "malformed", short reads
        raise _refusal(error, path, what, f"SQLite cannot read it ({db_error})") from None
    finally:
        db.close()


def _create(path: Path, schema: list[str], fmt: str) -> None:
    """A new store at ``path``, whole or not at all: built under a temporary name, then renamed."""
    temporary = path.with_name(f".{path.name}.new-{os.getpid()}")
    for leftover in (temporary, Path(f"{temporary}-wal"), Path(f"{temporary}-shm")):
        leftover.unlink(missing_ok=True)
    try:
        db = sqlite3.connect(str(temporary), isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            db.execute("BEGIN")
            for statement in schema:
                db.execute(statement)
            db.execute("INSERT INTO meta VALUES('format', ?)", (fmt,))
            db.execute("COMMIT")
        finally:
            db.close()  # the last connection: its WAL is checkpointed into the file and removed
        replace_durably(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def open_store(path: str | os.PathLike[str], schema: Iterable[str], fmt: str, what: str, error: type[Exception]) -> sqlite3.Connection:
    """The connection to the store at ``path`` (made with ``schema`` if missing); ``error`` if it is not one.

    ``error`` is called as ``error(message, path)``.  The schema's
    statements are ``CREATE ... IF NOT EXISTS``: they run on every open, so
    a table added by a later version of the same format appears in an
    existing store.
    """
    path = Path(path)
    statements = list(schema)
    path.parent.mkdir(parents=True, exist_ok=True)
    if os.path.lexists(path):
        check_store(path, fmt, what, error)
    else:
        try:
            _create(path, statements, fmt)
        except sqlite3.Error as db_error:
            raise error(f"{path}: a new {what} could not be made ({db_error})", path) from None
    try:
        db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    except sqlite3.Error as db_error:
        raise _refusal(error, path, what, f"SQLite cannot open it ({db_error})") from None
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        for statement in statements:
            db.execute(statement)
    except sqlite3.DatabaseError as db_error:
        db.close()
        raise _refusal(error, path, what, f"SQLite cannot read it ({db_error})") from None
    return db
