"""The cache's high-water mark: how far its committed history reached, kept where a loss cannot also take it.

Why: a cache whose WAL is cut short after a kill -9 (or an older copy of
its file, restored) opens as a valid SQLite database with a shorter
history, and would serve it as complete -- subscribers would never hear of
the acknowledged messages it lost.  The mark is a small file beside the
database (``cache.sqlite3.hwm``), replaced whole with fsync (write, fsync,
rename, fsync the directory), so whatever happens to the database file
and its WAL leaves it as it was.  On start, a database whose highest seq
is below the mark has lost committed messages: it is refused
(:class:`CacheCorrupt`, naming both files) unless the operator accepts the
loss (``Cache.open(accept_loss=True)``, ``flowcast cast accept-loss``).

What it costs: the mark is written at most once every ``every`` seconds
(default 1) while publishes commit, once more when the writer falls idle
with a stale mark, and at a clean close -- never an fsync per commit.  So
it can lag the database by up to about a second of commits: a loss of
only what was committed in that last second is not seen.  It never leads
the database (it is written after the commits it records), so it can
never accuse a good cache.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from flowcast.cast import cachedb
from flowcast.cast.cacheerrors import CacheCorrupt, CacheLost
from flowcast.runtime.durable import atomic_write

__all__ = ["MARK_EVERY", "Marker", "checked_high", "mark_path", "read_mark", "write_mark"]

log = logging.getLogger("flowcast.cast.cache")

MARK_FORMAT = "flowcast-cast-hwm-1"
#: Seconds between mark writes while publishes commit.
MARK_EVERY = 1.0
_MAX_BYTES = 4096


def mark_path(path: Path) -> Path:
    """Where the mark of the cache at ``path`` lives: beside it, ``<name>.hwm``."""
    return path.with_name(path.name + ".hwm")


def read_mark(path: Path, estate: str) -> int | None:
    """The seq the mark of the cache at ``path`` records; None without a mark; CacheCorrupt for a bad one."""
    where = mark_path(path)
    try:
        with open(where, "rb") as handle:
            raw = handle.read(_MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise CacheCorrupt(path, f"its high-water mark {where} cannot be read ({error.strerror or error})") from None
    try:
        doc = json.loads(raw) if len(raw) <= _MAX_BYTES else None
        ok = isinstance(doc, dict) and doc.get("format") == MARK_FORMAT and type(doc.get("high")) is int and doc["high"] >= 0
    except ValueError:
        ok = False
    if not ok:
        raise CacheCorrupt(path, f"its high-water mark {where} is damaged (not a {MARK_FORMAT} file)")
    if doc.get("estate") != estate:
        raise CacheCorrupt(path, f"its high-water mark {where} is of estate {doc.get('estate')!r}, not of {estate!r}")
    return int(doc["high"])


def write_mark(path: Path, estate: str, high: int) -> None:
    """Record ``high`` as the mark of the cache at ``path``, durably, whole or not at all."""
    doc = {"format": MARK_FORMAT, "estate": estate, "high": int(high)}
    atomic_write(mark_path(path), (json.dumps(doc) + "\n").encode(), 0o600)


class Marker:
    """When the writer records the mark: after commits, at most every ``every`` s; when idle; at close.

    Only the writer's thread calls it.  A mark that cannot be written (a
    full disk) is logged and tried again when next due; the publishes go on.
    """

    def __init__(self, path: Path, estate: str, marked: int, every: float = MARK_EVERY) -> None:
        self.path = path
        self.estate = estate
        self.marked = marked
        self.every = float(every)
        self.at = time.monotonic()
        self.writes = 0
        self.failed = 0

    def due_in(self, high: int) -> float | None:
        """Seconds until the mark for ``high`` is due (0: now); None when it records ``high`` already."""
        if high <= self.marked:
            return None
        return max(0.0, self.every - (time.monotonic() - self.at))

    def maybe(self, high: int) -> None:
        """Write the mark if it is due for ``high``."""
        if self.due_in(high) == 0.0:
            self.write(high)

    def write(self, high: int) -> None:
        if high <= self.marked:
            return
        self.at = time.monotonic()
        try:
            write_mark(self.path, self.estate, high)
        except OSError as error:
            self.failed += 1
            log.error("the CAST cache %s: its high-water mark could not be written (%s); trying again in %g s",
                      self.path, error.strerror or error, self.every)
            return
        self.marked = high
        self.writes += 1


def loss(path: Path, marked: int, high: int) -> CacheLost:
    """The refusal of a cache that ends at ``high`` while its mark says ``marked`` was committed."""
    return CacheLost(
        path,
        f"it lost committed messages: its high-water mark {mark_path(path)} says seq {marked} was committed, but it"
        f" ends at seq {high} (a WAL cut short, or an older copy restored); to serve it as it is, accept the loss"
        f" (flowcast cast accept-loss LAYOUT, or Cache.open(accept_loss=True))",
        high,
        marked,
    )


def checked_high(path: Path, estate: str, *, check: bool = True, accept_loss: bool = False, now: float = 0.0,
                 retention: float = 86400.0) -> int:
    """Before the owner opens the cache at ``path`` for writing: make it if missing, hold it to its mark.

    Returns the seq the mark records once this returns (the writer's
    :class:`Marker` starts from it).  Everything is checked on a probe
    that writes nothing, so a refused cache -- and its WAL -- is left byte
    for byte as it was.  Refusals (CacheCorrupt): a damaged file or mark,
    and a loss -- the database ends below its mark, or is missing while
    its mark says messages were committed (a cache moved aside without its
    ``.hwm``, or a wrong path).  ``accept_loss`` serves such a cache as it
    is instead: see :func:`accept`.
    """
    marked = read_mark(path, estate)  # first: a mark read after the database could be newer than what was read
    if not path.exists():
        if marked:
            if not accept_loss:
                raise CacheLost(path, f"it is missing, but its high-water mark {mark_path(path)} says seq {marked} was"
                                      f" committed (moved aside without its .hwm, or the wrong directory); to start"
                                      f" afresh, move the .hwm aside too, or accept the loss (flowcast cast accept-loss LAYOUT)",
                                0, marked)
        cachedb.create(path, estate)
        high = 0
    else:
        probe = cachedb.connect(path, estate, probe=True, check=check)
        try:
            high = cachedb.high_of(probe)
        finally:
            probe.close()
    if marked is not None and high < marked:
        if not accept_loss:
            raise loss(path, marked, high)
        accept(path, estate, high, marked, now, retention)
        return marked
    if marked is None:
        if high:
            log.warning("the CAST cache %s has no high-water mark beside it: whether it lost messages before this start"
                        " cannot be told; from now on it is kept (%s)", path, mark_path(path))
        write_mark(path, estate, high)
    return max(high, marked or 0)


def accept(path: Path, estate: str, high: int, marked: int, now: float, retention: float) -> None:
    """The operator accepts that seqs ``high + 1 .. marked`` are gone: serve the cache as it is, said.

    Seqs are never given twice (a subscriber whose cursor passed ``high``
    must not skip new messages under reused seqs), so the cache goes on from
    ``marked + 1``; and the lost range is not silent: a marker row at
    ``marked`` that no checksum matches makes every subscription reading
    past it get a ``cast.gap`` over the range, as a damaged message does.
    """
    conn = cachedb.connect(path, estate, check=False) if path.exists() else None
    try:
        if conn is not None:
            cachedb.mark_lost(conn, marked, now, retention)
    finally:
        if conn is not None:
            conn.close()
    write_mark(path, estate, marked)
    log.error("the CAST cache %s: accepting the loss of committed messages seq %d..%d as the operator asked; subscribers"
              " reading past them get a cast.gap", path, high + 1, marked)
