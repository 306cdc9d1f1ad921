"""Opening the cache's SQLite file: the schema, and the checks that refuse a bad one.

Why so strict: a cache that quietly starts empty after a crash or a wrong
path loses every message it acknowledged, and nobody finds out until a
subscriber misses them.  So a file that is present but unreadable, damaged,
of another format or of another estate raises :class:`CacheCorrupt` naming
the path; only a missing file becomes a new cache.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from flowcast.cast.cacheerrors import CacheCorrupt, CacheError
from flowcast.cast.sqlitestore import read_only_uri
from flowcast.runtime.durable import replace_durably

__all__ = ["FORMAT", "connect", "create", "high_of", "mark_lost"]

#: Bumped when the table layout changes; a file of another format is refused, not migrated
#: (format 1 had no per-message ``crc``: its rows could not be told good from damaged).
FORMAT = "flowcast-cast-cache-2"

SCHEMA = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE messages(
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id BLOB NOT NULL UNIQUE,
    name TEXT NOT NULL,
    publisher TEXT NOT NULL,
    stamp REAL NOT NULL,
    expires REAL NOT NULL,
    recipients TEXT,
    size INTEGER NOT NULL,
    data BLOB,
    crc INTEGER NOT NULL
);
CREATE INDEX messages_expires ON messages(expires);
"""


def _pragmas(conn: sqlite3.Connection, readonly: bool) -> None:
    conn.execute("PRAGMA busy_timeout=5000")
    if not readonly:
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise CacheError(f"the CAST cache could not switch to WAL mode (got {mode!r})")
        conn.execute("PRAGMA synchronous=FULL")


def create(path: Path, estate: str) -> None:
    """A new, empty cache at ``path`` (which must not exist), committed durably.

    Built under a temporary name and renamed into place: a process killed
    while making it leaves no file without its meta, which the next start
    would refuse as damaged.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.new-{os.getpid()}")
    for leftover in (temporary, Path(f"{temporary}-wal"), Path(f"{temporary}-shm")):
        leftover.unlink(missing_ok=True)
    try:
        conn = sqlite3.connect(temporary, isolation_level=None)
        try:
            _pragmas(conn, False)
            conn.execute("BEGIN")
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.executemany("INSERT INTO meta(key, value) VALUES (?, ?)", [("format", FORMAT), ("estate", estate)])
            conn.execute("COMMIT")
        finally:
            conn.close()  # the last connection: the WAL goes into the file
        replace_durably(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def high_of(conn: sqlite3.Connection) -> int:
    """The highest seq the cache at ``conn`` ever gave (AUTOINCREMENT's record: never lowered by a delete)."""
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'messages'").fetchone()
    return int(row[0]) if row else 0


def mark_lost(conn: sqlite3.Connection, seq: int, now: float, retention: float) -> None:
    """Put a row at ``seq`` that reads as damaged (no checksum matches it): the end of a range known lost.

    AUTOINCREMENT then goes on after ``seq``.  Its id is its own (16 bytes
    derived from the seq, with a first byte no real id has), its data empty.
    """
    lost_id = b"\xff\xfelost" + seq.to_bytes(10, "big")
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("INSERT OR IGNORE INTO messages(seq, id, name, publisher, stamp, expires, recipients, size, data, crc)"
                     " VALUES (?, ?, '(lost)', '', ?, ?, NULL, 0, x'', -1)", (seq, lost_id, now, now + retention))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def connect(path: Path, estate: str, *, readonly: bool = False, check: bool = True, probe: bool = False) -> sqlite3.Connection:
    """A checked connection to the cache at ``path``; CacheCorrupt if it is not one of ``estate``.

    ``readonly`` opens through ``file:...?mode=ro``: SQLite then refuses
    every write, so the CLI can read while the estate runs.  ``probe``: a
    read-only look before the owner opens it for writing, which writes
    nothing beside the file either (sqlitestore.read_only_uri), so a file it
    refuses is left exactly as it was.  ``check`` runs ``PRAGMA
    quick_check`` (once per open, not per connection).
    """
    try:
        if path.stat().st_size == 0:  # SQLite would take it for an empty database
            raise CacheCorrupt(path, "it is empty (0 bytes)")
    except OSError as error:
        raise CacheCorrupt(path, f"it cannot be read ({error.strerror or error})") from None
    try:
        if probe:
            conn = sqlite3.connect(read_only_uri(path), uri=True, isolation_level=None, check_same_thread=False)
        elif readonly:
            conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
        else:
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as error:
        raise CacheError(f"the CAST cache {path} could not be opened: {error}") from error
    try:
        try:
            rows = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.OperationalError as error:
            if "no such table" in str(error):
                raise CacheCorrupt(path, "it has no meta table (not a CAST cache, or a damaged one)") from error
            raise
        if rows.get("format") != FORMAT:
            older = " (an older cache, without per-message checksums; it is not migrated)" if rows.get("format") == "flowcast-cast-cache-1" else ""
            raise CacheCorrupt(path, f"its format is {rows.get('format')!r}, not {FORMAT!r}{older}")
        if rows.get("estate") != estate:
            raise CacheCorrupt(path, f"it is the cache of estate {rows.get('estate')!r}, not of {estate!r}")
        if check:
            problems = [row[0] for row in conn.execute("PRAGMA quick_check(5)").fetchall()]
            if problems != ["ok"]:
                raise CacheCorrupt(path, "its integrity check failed: " + "; ".join(map(str, problems)))
        _pragmas(conn, readonly or probe)
    except CacheCorrupt:
        conn.close()
        raise
    except sqlite3.DatabaseError as error:  # "file is not a database", "malformed", short reads
        conn.close()
        raise CacheCorrupt(path, f"SQLite cannot read it ({error})") from error
    except BaseException:
        conn.close()
        raise
    return conn
