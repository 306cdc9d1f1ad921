"""The cache's writes: group commit of publishes, and expiry, on one connection.

Why group commit: an fsync per message caps a disk at a few thousand
publishes a second (measured here: about 5,500/s with ``synchronous=FULL``),
while one transaction of a thousand rows costs about what one row does.  So
publishes queue, and whatever queued while the last transaction committed
goes in the next one (up to ``BATCH_ROWS`` rows or ``BATCH_BYTES``).  A
publish's ticket is completed only after its transaction committed.

:class:`Writes` is the SQL, with no threads in it.  :class:`ThreadWriter`
runs it on a thread of its own (a real house: the house thread never waits
for a disk), :class:`InlineWriter` runs it on the house thread from a timer
(a simulated house: the virtual clock stays the only source of order, so a
seed is still a trace).  Both hand results back the same way: a deque the
house drains with ``Cache.complete()``, after a wake-up through the
scheduler (a socket pair the writer thread writes a byte to; never a poll).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flowcast.cast.cacheerrors import CacheError, CacheFull
from flowcast.cast.cachesum import checksum

__all__ = ["BATCH_BYTES", "BATCH_ROWS", "Expire", "InlineWriter", "Job", "ThreadWriter", "Writes"]

log = logging.getLogger(__name__)

BATCH_ROWS = 2000
BATCH_BYTES = 4 << 20
#: Rows expired per transaction: expiry never holds the writer for long.
EXPIRE_ROWS = 10_000
#: How long an id outlives its message, so a retry just after expiry is still a duplicate.
ID_GRACE = 600.0


class Job:
    """One publish on its way to disk."""

    __slots__ = ("ticket", "id", "name", "publisher", "stamp", "expires", "recipients", "size", "data")

    def __init__(self, ticket: Any, id: bytes, name: str, publisher: str, stamp: float, expires: float,
                 recipients: str | None, size: int, data: bytes) -> None:
        self.ticket = ticket
        self.id = id
        self.name = name
        self.publisher = publisher
        self.stamp = stamp
        self.expires = expires
        self.recipients = recipients
        self.size = size
        self.data = data


class Expire:
    """An expiry pass, as of cache time ``now``."""

    __slots__ = ("ticket", "now")

    def __init__(self, ticket: Any, now: float) -> None:
        self.ticket = ticket
        self.now = now


#: What a finished job hands back: (ticket, seq, duplicate, error).
Result = tuple[Any, int, bool, BaseException | None]


class Writes:
    """The cache's SQL writes on one connection, and the counts they keep.

    ``bytes``, ``high`` and ``low`` are plain ints the house thread may read
    at any time (the writer is their only writer).
    """

    def __init__(self, conn: sqlite3.Connection, path: Path, max_bytes: int, marker: Any = None) -> None:
        self.conn = conn
        #: The high-water mark's writer (cachemark.Marker), called between transactions; None: no mark kept.
        self.marker = marker
        self.path = path
        self.max_bytes = max_bytes
        self.bytes = int(conn.execute("SELECT total(size) FROM messages").fetchone()[0])
        row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'messages'").fetchone()
        self.high = int(row[0]) if row else 0
        self.low = self._low()
        self.stored = 0
        self.duplicates = 0
        self.refused = 0
        self.expired = 0

    def _low(self) -> int:
        row = self.conn.execute("SELECT min(seq) FROM messages WHERE size > 0").fetchone()
        return int(row[0]) if row and row[0] is not None else self.high + 1

    def publish(self, jobs: list[Job]) -> list[Result]:
        """Store ``jobs`` in one transaction; a job whose id is stored is a duplicate of it."""
        conn = self.conn
        execute = conn.execute
        results: list[Result] = []
        before = self.bytes
        total = before
        high = self.high
        insert = (
            "INSERT OR IGNORE INTO messages(id, name, publisher, stamp, expires, recipients, size, data, crc)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        lookup = "SELECT seq FROM messages WHERE id = ?"
        stored = duplicates = refused = 0
        first = 0  # the first seq stored by this transaction
        try:
            execute("BEGIN IMMEDIATE")
            for job in jobs:
                if total + job.size > self.max_bytes:
                    row = execute(lookup, (job.id,)).fetchone()
                    if row is not None:
                        results.append((job.ticket, row[0], True, None))
                        duplicates += 1
                    else:
                        results.append((job.ticket, 0, False, CacheFull(
                            f"the CAST cache {self.path} is full: {total} of {self.max_bytes} bytes held within"
                            f" retention, a message of {job.size} does not fit (nothing is evicted early)")))
                        refused += 1
                    continue
                cursor = execute(insert, (job.id, job.name, job.publisher, job.stamp, job.expires, job.recipients, job.size,
                                          job.data, checksum(job.id, job.name, job.publisher, job.stamp, job.recipients, job.data)))
                if cursor.rowcount == 1:
                    seq = cursor.lastrowid
                    total += job.size
                    high = seq
                    first = first or seq
                    stored += 1
                    results.append((job.ticket, seq, False, None))
                else:
                    results.append((job.ticket, execute(lookup, (job.id,)).fetchone()[0], True, None))
                    duplicates += 1
            execute("COMMIT")
        except sqlite3.Error as error:
            _rollback(conn)
            log.error("CAST cache write of %d messages failed: %s", len(jobs), error)
            refusal = CacheError(f"the CAST cache {self.path} could not store the message: {error}")
            self.refused += len(jobs)
            return [(job.ticket, 0, False, refusal) for job in jobs]
        if self.low > self.high and first:  # nothing was live: the first new row is the low water
            self.low = first
        self.bytes = total
        self.high = high
        self.stored += stored
        self.duplicates += duplicates
        self.refused += refused
        return results

    def expire(self, now: float) -> int:
        """Drop the data of messages past ``expires``; forget their ids ``ID_GRACE`` later.

        Returns how many messages expired.  In batches of ``EXPIRE_ROWS``,
        each its own transaction, so publishes are never held up for long.
        """
        conn = self.conn
        expired = 0
        while True:
            try:
                execute = conn.execute
                execute("BEGIN IMMEDIATE")
                rows = execute(
                    "SELECT seq, size FROM messages WHERE expires <= ? AND size > 0 ORDER BY expires LIMIT ?",
                    (now, EXPIRE_ROWS),
                ).fetchall()
                if rows:
                    conn.executemany("UPDATE messages SET data = NULL, size = 0 WHERE seq = ?", [(r[0],) for r in rows])
                execute(
                    "DELETE FROM messages WHERE seq IN (SELECT seq FROM messages WHERE expires <= ? LIMIT ?)",
                    (now - ID_GRACE, EXPIRE_ROWS),
                )
                execute("COMMIT")
            except sqlite3.Error as error:
                _rollback(conn)
                raise CacheError(f"the CAST cache {self.path} could not expire messages: {error}") from error
            self.bytes -= sum(r[1] for r in rows)
            expired += len(rows)
            if len(rows) < EXPIRE_ROWS:
                break
        self.expired += expired
        self.low = self._low()
        return expired


def _rollback(conn: sqlite3.Connection) -> None:
    try:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    except sqlite3.Error:
        log.exception("CAST cache rollback failed")


def _take(queue: deque, rows: int = BATCH_ROWS, size: int = BATCH_BYTES) -> list:
    """The next transaction's jobs: publishes up to the bounds, or one expiry alone."""
    first = queue.popleft()
    if isinstance(first, Expire):
        return [first]
    taken = [first]
    total = first.size
    while queue and len(taken) < rows and total < size and not isinstance(queue[0], Expire):
        job = queue.popleft()
        taken.append(job)
        total += job.size
    return taken


def _run(writes: Writes, taken: list) -> list[Result]:
    """Run one transaction's jobs; whatever goes wrong, every ticket in it gets an answer."""
    try:
        return _run_jobs(writes, taken)
    except Exception as error:  # noqa: BLE001 - a bug must refuse the batch, not strand its tickets
        log.exception("CAST cache writer failed on a batch of %d", len(taken))
        _rollback(writes.conn)
        refusal = CacheError(f"the CAST cache {writes.path} failed: {error!r}")
        return [(job.ticket, 0, False, refusal) for job in taken]


def _run_jobs(writes: Writes, taken: list) -> list[Result]:
    if isinstance(taken[0], Expire):
        try:
            count = writes.expire(taken[0].now)
        except CacheError as error:
            return [(taken[0].ticket, 0, False, error)]
        return [(taken[0].ticket, count, False, None)]
    return writes.publish(taken)


class ThreadWriter:
    """Runs :class:`Writes` on its own thread; ``wake`` is called after each transaction."""

    def __init__(self, writes: Writes, wake: Callable[[], None], name: str = "cast-cache-writer") -> None:
        self.writes = writes
        self.results: deque[Result] = deque()
        self._wake = wake
        self._queue: deque = deque()
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._closed = False
        self._idle = False
        self.submitted = 0
        self.finished = 0
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: Job | Expire) -> None:
        """Queue ``job`` (from the house thread only).

        No lock unless the writer sleeps: a contended lock per publish hands
        the GIL to the writer thread and back (measured: a third of the
        publish path).  The writer says it sleeps (``_idle``) before it looks
        at the queue a last time, and this appends before it reads ``_idle``,
        so one of the two always sees the other.
        """
        if self._closed:
            raise CacheError("the CAST cache is closed", "closed")
        self._queue.append(job)
        self.submitted += 1
        if self._idle:
            with self._lock:
                self._cond.notify_all()

    @property
    def pending(self) -> int:
        return self.submitted - self.finished

    def wait(self, timeout: float) -> bool:
        """Block until a result is ready to complete, or nothing is pending; False on timeout."""
        with self._lock:
            return self._cond.wait_for(lambda: self.results or self.finished >= self.submitted, timeout)

    def _loop(self) -> None:
        queue = self._queue
        writes = self.writes
        marker = writes.marker
        while True:
            if not queue:
                # Idle: the mark catches up with what committed, once it is due (never an fsync per commit).
                due = marker.due_in(writes.high) if marker is not None else None
                with self._lock:
                    self._idle = True
                    self._cond.wait_for(lambda: queue or self._closed, due)
                    self._idle = False
            if not queue:
                if marker is not None and (self._closed or marker.due_in(writes.high) == 0.0):
                    marker.write(writes.high)
                if self._closed:
                    return
                continue
            taken = _take(queue)
            results = _run(self.writes, taken)
            with self._lock:
                self.results.extend(results)
                self.finished += len(taken)
                self._cond.notify_all()
            try:
                self._wake()
            except Exception:  # noqa: BLE001 - a failed wake must not stop the writes
                log.exception("CAST cache wake-up failed")
            if marker is not None:  # after the tickets are answered: the mark adds nothing to their wait
                marker.maybe(writes.high)

    def close(self, timeout: float = 30.0) -> None:
        """Write what is queued, then end the thread."""
        with self._lock:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)


class InlineWriter:
    """Runs :class:`Writes` on the calling thread, from ``commit`` (a timer or ``flush``)."""

    def __init__(self, writes: Writes, arm: Callable[[], None] | None) -> None:
        self.writes = writes
        self.results: deque[Result] = deque()
        self._queue: deque = deque()
        self._arm = arm
        self._armed = False
        self._closed = False
        self.submitted = 0
        self.finished = 0

    def submit(self, job: Job | Expire) -> None:
        if self._closed:
            raise CacheError("the CAST cache is closed", "closed")
        self._queue.append(job)
        self.submitted += 1
        if self._arm is not None and not self._armed:
            self._armed = True
            self._arm()

    @property
    def pending(self) -> int:
        return self.submitted - self.finished

    def commit(self) -> None:
        """Write everything queued, a transaction per batch."""
        self._armed = False
        queue = self._queue
        while queue:
            taken = _take(queue)
            self.results.extend(_run(self.writes, taken))
            self.finished += len(taken)
        if self.writes.marker is not None:  # no timer of its own: a mark due is written at the next commit, or close
            self.writes.marker.maybe(self.writes.high)

    def wait(self, timeout: float) -> bool:
        self.commit()
        return True

    def close(self, timeout: float = 30.0) -> None:
        self.commit()
        self._closed = True
        if self.writes.marker is not None:
            self.writes.marker.write(self.writes.high)
