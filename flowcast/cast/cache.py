"""The publishing estate's durable message cache (docs/cast.md, "The cache").

An acknowledged publish is on disk: :meth:`Cache.publish` returns a
:class:`Ticket` that completes, on the house thread, only after the
transaction holding the message committed with ``synchronous=FULL``.  The
cache keeps each message for ``retention`` seconds whether or not anyone
received it, remembers ids ``ID_GRACE`` longer so a late retry is still a
duplicate, and refuses (:class:`CacheFull`) rather than evicts when the
byte limit is reached.  Subscriptions read it by seq (:meth:`Cache.read`):
replay and the live stream are reads of the same order, so a resync has no
gap.

Time: stamps and expiry must mean the same after a restart, so a real
house's cache counts wall seconds (taken once at open, then advanced by the
house clock); a simulated house's cache counts its virtual clock, so 25
simulated hours expire messages in no time.
"""

from __future__ import annotations

import logging
import socket
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from flowcast.cast import cachedb
from flowcast.cast.cachedamage import Damage, intact
from flowcast.cast.cachemark import MARK_EVERY, Marker, checked_high, loss, read_mark
from flowcast.cast.cacheerrors import CacheCorrupt, CacheError, CacheFull
from flowcast.cast.cachewriter import Expire, InlineWriter, Job, ThreadWriter, Writes
from flowcast.cast.ids import check_id, new_id
from flowcast.cast.names import (
    CastNameError,
    Split,
    check_name,
    check_recipients,
    check_split,
    compiled,
    estate_of,
    split_takes,
)
from flowcast.runtime.clock import Clock, wall_now

__all__ = ["Cache", "CacheCorrupt", "CacheError", "CacheFull", "Read", "Stored", "Ticket"]

log = logging.getLogger(__name__)

MAX_MESSAGE = 256 << 10
#: Publishes queued for the disk before ``publish`` refuses (``reason`` busy):
#: memory stays bounded when a flow publishes faster than the disk commits.
MAX_PENDING = 100_000
_PUBLISHER_MAX = 128


class Ticket:
    """A publish (or expiry) on its way to disk; fields are set on the house thread once durable.

    ``error`` is None when stored: then ``seq`` is the message's place in
    the cache and ``duplicate`` says it was stored before under this id.
    """

    __slots__ = ("id", "name", "done", "seq", "duplicate", "error", "_callbacks")

    def __init__(self, id: bytes = b"", name: str = "") -> None:
        self.id = id
        self.name = name
        self.done = False
        self.seq = 0
        self.duplicate = False
        self.error: BaseException | None = None
        self._callbacks: list[Callable[[Ticket], Any]] | None = None

    @property
    def ok(self) -> bool:
        return self.done and self.error is None

    def add_done(self, callback: Callable[["Ticket"], Any]) -> None:
        """Call ``callback(ticket)`` on the house thread when done (at once if it is)."""
        if self.done:
            callback(self)
        elif self._callbacks is None:
            self._callbacks = [callback]
        else:
            self._callbacks.append(callback)

    def __repr__(self) -> str:
        state = "pending" if not self.done else (f"error {self.error!r}" if self.error else f"seq {self.seq}")
        return f"<Ticket {self.name!r} {state}{' duplicate' if self.duplicate else ''}>"


class Stored(NamedTuple):
    """One cached message as a read returns it."""

    seq: int
    id: bytes
    name: str
    publisher: str
    stamp: float
    recipients: tuple[str, ...] | None
    data: bytes


class Read(list):
    """A read's messages, and ``upto``: every match with ``after < seq <= upto`` is in it.

    ``upto`` can pass the last message returned (rows that did not match
    were scanned), so a subscription moves on without scanning them again.
    ``damaged``: the seqs in ``after < seq <= upto`` whose checksum failed.
    A read returns messages or damaged seqs, never both (it stops where the
    one turns into the other), so a reader that must say what it cannot
    serve (the publisher, with a ``cast.gap``) says it in stream order.
    """

    upto: int = 0
    damaged: tuple[int, ...] | list[int] = ()


class Cache:
    """One estate's CAST cache: publish durably, read by seq, expire, count."""

    def __init__(self) -> None:  # use Cache.open
        raise TypeError("use Cache.open(path, estate=...)")

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        estate: str,
        clock: Clock | None = None,
        retention: float = 86400.0,
        max_bytes: int = 1 << 30,
        max_message: int = MAX_MESSAGE,
        scheduler: Any = None,
        readonly: bool = False,
        threaded: bool | None = None,
        expire_every: float | None = 60.0,
        check: bool = True,
        max_pending: int = MAX_PENDING,
        accept_loss: bool = False,
        mark_every: float = MARK_EVERY,
    ) -> "Cache":
        """Open (or create, if missing) the cache of ``estate`` at ``path``.

        ``scheduler``: tickets complete from the scheduler's loop (woken
        through a socket pair) and expiry runs every ``expire_every`` clock
        seconds; without one, the caller completes them with
        :meth:`complete`, :meth:`wait` or :meth:`flush`.  ``threaded``
        (default: unless the clock is virtual) writes on a thread of its own.
        ``readonly`` opens through SQLite's read-only URI, for the CLI while
        the estate runs: it publishes nothing and never creates a file.
        Raises :class:`CacheCorrupt` for a file that is present but broken,
        or one that lost committed messages: it ends below its high-water
        mark (cachemark.py, written every ``mark_every`` seconds of
        commits).  ``accept_loss`` serves such a cache as it is, the loss
        logged and told to subscribers as a gap -- an operator's decision.
        """
        self = object.__new__(cls)
        path = Path(path)
        if not isinstance(estate, str) or not estate:
            raise CacheError("a cache needs the name of its estate", "bad_name")
        if retention <= 0 or max_bytes <= 0 or max_message <= 0:
            raise CacheError(f"retention, max_bytes and max_message must be positive, got {retention}, {max_bytes}, {max_message}", "bad_config")
        self.path = path
        self.estate = estate
        self.clock = clock
        self.retention = float(retention)
        self.max_bytes = int(max_bytes)
        self.max_message = int(max_message)
        self.max_pending = int(max_pending)
        self.readonly = readonly
        self.scheduler = scheduler
        self._listeners: list[Callable[[list[Ticket]], Any]] = []
        self._wake_pair: tuple[socket.socket, socket.socket] | None = None
        self._expire_timer = None
        self._closed = False
        self._writer: ThreadWriter | InlineWriter | None = None
        self._damage = Damage(path)
        virtual = bool(getattr(clock, "virtual", False))
        self._origin = (clock.now() if clock is not None else 0.0, 0.0 if virtual else wall_now())
        if readonly:
            if not path.exists():
                raise CacheError(f"there is no CAST cache at {path}", "missing")
            marked = read_mark(path, estate)  # before the database: a mark is never ahead of what it records
            self._reader = cachedb.connect(path, estate, readonly=True, check=check)
            high = cachedb.high_of(self._reader)
            if marked is not None and high < marked:
                self._reader.close()
                raise loss(path, marked, high)
            self._writes = None
            return self
        marked = checked_high(path, estate, check=check, accept_loss=accept_loss, now=self.now(), retention=self.retention)
        self._reader = cachedb.connect(path, estate, check=False)  # checked by the probe
        try:
            write_conn = cachedb.connect(path, estate, check=False)
        except BaseException:
            self._reader.close()
            raise
        self._writes = Writes(write_conn, path, self.max_bytes, Marker(path, estate, marked, mark_every))
        if threaded is None:
            threaded = not virtual
        if threaded:
            wake = self._wake_from_writer
            if scheduler is not None:
                receive, send = socket.socketpair()
                receive.setblocking(False)
                send.setblocking(False)
                self._wake_pair = (receive, send)
                scheduler.add_reader(receive, self._on_wake)
            self._writer = ThreadWriter(self._writes, wake)
        else:
            arm = (lambda: scheduler.call_later(0.0, self._commit_inline)) if scheduler is not None else None
            self._writer = InlineWriter(self._writes, arm)
        if scheduler is not None and expire_every:
            self._expire_every = float(expire_every)
            self._expire_timer = scheduler.call_later(self._expire_every, self._expire_tick)
        return self

    # -- time ---------------------------------------------------------------

    def now(self) -> float:
        """Cache time: wall seconds (a real clock) or the virtual clock's seconds."""
        if self.clock is None:
            return wall_now()
        return self._origin[1] + (self.clock.now() - self._origin[0])

    # -- publishing ---------------------------------------------------------------

    def publish(
        self,
        name: str,
        data: bytes,
        id: bytes | None = None,
        publisher: str = "",
        recipients: Any = None,
    ) -> Ticket:
        """Queue ``data`` under ``name``; the ticket completes once it is durable.

        Bad input raises at once (:class:`~flowcast.cast.names.CastNameError`
        with ``reason`` bad_name or foreign_prefix, :class:`CacheError`
        too_large, or busy when ``max_pending`` publishes wait for the disk:
        back-pressure, retry later); what the disk says (:class:`CacheFull`,
        an I/O error) arrives on the ticket.  A retry must pass the same ``id``.
        """
        self._writable()
        if self._writer.pending >= self.max_pending:  # type: ignore[union-attr]
            raise CacheError(
                f"the CAST cache {self.path} has {self.max_pending} publishes waiting for the disk; retry later", "busy"
            )
        check_name(name)
        if estate_of(name) != self.estate:
            raise CastNameError(
                f"estate {self.estate!r} publishes only under its own prefix '{self.estate}/...', not {name!r}",
                "foreign_prefix",
            )
        if isinstance(data, (bytearray, memoryview)):
            data = bytes(data)
        if not isinstance(data, bytes):
            raise CacheError(f"a message's data is bytes, got {type(data).__name__}", "bad_data")
        if len(data) > self.max_message:
            raise CacheError(f"a message is at most {self.max_message} bytes, got {len(data)}", "too_large")
        id = new_id() if id is None else check_id(id)
        if not isinstance(publisher, str) or len(publisher) > _PUBLISHER_MAX:
            raise CastNameError(f"a publisher is a string of at most {_PUBLISHER_MAX} characters, got {publisher!r}")
        found = check_recipients(recipients)
        text = " ".join(found) if found else None
        size = len(data) + len(name) + len(publisher) + (len(text) if text else 0) + 16
        stamp = self.now()
        ticket = Ticket(id, name)
        self._writer.submit(Job(ticket, id, name, publisher, stamp, stamp + self.retention, text, size, data))  # type: ignore[union-attr]
        return ticket

    def expire(self) -> Ticket:
        """Queue an expiry pass as of now; the ticket's ``seq`` is how many messages expired."""
        self._writable()
        ticket = Ticket(b"", "expire")
        self._writer.submit(Expire(ticket, self.now()))  # type: ignore[union-attr]
        return ticket

    def listen(self, callback: Callable[[list[Ticket]], Any]) -> None:
        """Call ``callback(tickets)`` on the house thread after tickets complete (the live stream's cue)."""
        self._listeners.append(callback)

    def on_damaged(self, callback: Callable[[int], Any]) -> None:
        """Call ``callback(seq)`` once per damaged message a read meets (on the reading thread)."""
        self._damage.listeners.append(callback)

    def unlisten(self, callback: Callable[[list[Ticket]], Any]) -> None:
        if callback in self._listeners:
            self._listeners.remove(callback)

    @property
    def pending(self) -> int:
        """Publishes and expiries queued or being written, not yet completed."""
        writer = self._writer
        return 0 if writer is None else writer.pending + len(writer.results)

    def complete(self) -> int:
        """Complete the tickets whose transactions finished; call on the house thread."""
        writer = self._writer
        if writer is None or not writer.results:
            return 0
        results = writer.results
        done: list[Ticket] = []
        popleft = results.popleft
        while results:
            ticket, seq, duplicate, error = popleft()
            ticket.seq = seq
            ticket.duplicate = duplicate
            ticket.error = error
            ticket.done = True
            done.append(ticket)
            if ticket._callbacks:
                for callback in ticket._callbacks:
                    self._call(callback, ticket)
                ticket._callbacks = None
        for listener in list(self._listeners):
            self._call(listener, done)
        return len(done)

    @staticmethod
    def _call(callback: Callable[[Any], Any], arg: Any) -> None:
        try:
            callback(arg)
        except Exception:  # noqa: BLE001 - one failing listener must not strand the other tickets
            log.exception("CAST cache callback %r failed", callback)

    def wait(self, timeout: float = 10.0) -> int:
        """Block until some tickets can complete (or none are pending), then complete them.

        For callers without a scheduler (tests, benches, tools); a house
        never blocks on the disk.
        """
        writer = self._writer
        if writer is None:
            return 0
        writer.wait(timeout)
        return self.complete()

    def flush(self, timeout: float = 30.0) -> None:
        """Block until everything queued is durable and its tickets completed."""
        deadline = time.monotonic() + timeout
        while self.pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CacheError(f"the CAST cache {self.path} did not finish {self.pending} writes in {timeout} s")
            self.wait(left)

    # -- reading ---------------------------------------------------------------

    def read(
        self,
        after: int,
        pattern: str | None = None,
        split: Split | None = None,
        limit: int = 1000,
        max_bytes: int = 256 << 10,
        to: str | None = None,
    ) -> Read:
        """Messages with seq > ``after`` in seq order that match, up to ``limit`` or ``max_bytes``.

        ``to`` (an estate) keeps only public messages and those addressed to
        that estate or its users: a remote learns nothing else.  At least
        one message is returned when any matches, however large.  The scan
        stops after ``limit * 8`` rows at most, so a rare pattern costs a
        bounded slice of the house per call (see :attr:`Read.upto`).  A
        message whose checksum fails is never returned: it is reported
        (:meth:`on_damaged`) and its seq is in :attr:`Read.damaged`, whether
        or not it would have matched -- the damage may be in its name.
        """
        if self._closed:
            raise CacheError("the CAST cache is closed", "closed")
        if type(after) is not int or after < 0:
            raise CacheError(f"a read starts after a seq, an integer >= 0, got {after!r}", "bad_cursor")
        if type(limit) is not int or limit < 1 or type(max_bytes) is not int or max_bytes < 1:
            raise CacheError(f"a read's limit and max_bytes are integers >= 1, got {limit!r}, {max_bytes!r}", "bad_read")
        match = compiled(pattern).matches if pattern is not None else None
        split = check_split(split)
        suffix = "@" + to if to is not None else None
        now = self.now()
        out = Read()
        out.upto = after
        total = 0
        scan_left = max(limit * 8, 256)
        chunk = min(max(limit, 64), 4096)
        position = after
        try:
            while scan_left > 0:
                rows = self._reader.execute(
                    "SELECT seq, id, name, publisher, stamp, recipients, data, expires, crc FROM messages"
                    " WHERE seq > ? ORDER BY seq LIMIT ?",
                    (position, min(chunk, scan_left)),
                ).fetchall()
                if not rows:
                    break
                scan_left -= len(rows)
                for seq, id, name, publisher, stamp, recipients, data, expires, crc in rows:
                    if data is None or expires <= now:
                        position = seq
                        continue
                    if not intact(id, name, publisher, stamp, recipients, data, crc):
                        if out:  # messages, then damage: the damage is the next read's
                            out.upto = position
                            return out
                        self._damage.found(seq)
                        if not out.damaged:
                            out.damaged = []
                        out.damaged.append(seq)  # type: ignore[union-attr]
                        position = seq
                        continue
                    if out.damaged:  # damage, then a message: the message is the next read's
                        out.upto = position
                        return out
                    if match is not None and not match(name):
                        position = seq
                        continue
                    if split is not None and not split_takes(split, id, name, publisher):
                        position = seq
                        continue
                    people = tuple(recipients.split(" ")) if recipients else None
                    if suffix is not None and people is not None and not any(
                        r == to or r.endswith(suffix) for r in people
                    ):
                        position = seq
                        continue
                    size = len(data) + len(name)
                    if out and (len(out) >= limit or total + size > max_bytes):
                        out.upto = position
                        return out
                    out.append(Stored(seq, id, name, publisher, stamp, people, data))
                    total += size
                    position = seq
                if len(rows) < chunk:
                    break
        except sqlite3.Error as error:
            raise CacheError(f"the CAST cache {self.path} could not be read: {error}") from error
        out.upto = position
        return out

    def get(self, seqs: list[int]) -> dict[int, Stored]:
        """The readable messages stored at ``seqs`` (by seq; expired, unknown and damaged ones are absent).

        For layers that keep their own index of the cache (the causal relay
        finds a message by content hash, then reads it here by seq).
        """
        if self._closed:
            raise CacheError("the CAST cache is closed", "closed")
        now = self.now()
        out: dict[int, Stored] = {}
        try:
            for start in range(0, len(seqs), 500):
                part = seqs[start:start + 500]
                rows = self._reader.execute(
                    "SELECT seq, id, name, publisher, stamp, recipients, data, expires, crc FROM messages"
                    f" WHERE seq IN ({','.join('?' * len(part))})",
                    part,
                ).fetchall()
                for seq, id, name, publisher, stamp, recipients, data, expires, crc in rows:
                    if data is not None and expires > now and not intact(id, name, publisher, stamp, recipients, data, crc):
                        self._damage.found(seq)  # reported, and absent like an unknown seq
                    elif data is not None and expires > now:
                        out[seq] = Stored(seq, id, name, publisher, stamp, tuple(recipients.split(" ")) if recipients else None, data)
        except sqlite3.Error as error:
            raise CacheError(f"the CAST cache {self.path} could not be read: {error}") from error
        return out

    @property
    def high_seq(self) -> int:
        """The highest seq ever given (a cursor above it is from the future)."""
        if self._writes is not None:
            return self._writes.high
        row = self._reader.execute("SELECT seq FROM sqlite_sequence WHERE name = 'messages'").fetchone()
        return int(row[0]) if row else 0

    @property
    def low_seq(self) -> int:
        """The lowest seq still readable (high_seq + 1 when nothing is)."""
        if self._writes is not None:
            return self._writes.low
        row = self._reader.execute("SELECT min(seq) FROM messages WHERE size > 0").fetchone()
        return int(row[0]) if row and row[0] is not None else self.high_seq + 1

    def stats(self) -> dict[str, Any]:
        """Counts for ``flowcast cast stats``: messages, bytes, oldest stamp, seq range, and this run's tallies."""
        try:
            count, size, oldest = self._reader.execute(
                "SELECT count(*), total(size), min(stamp) FROM messages WHERE size > 0"
            ).fetchone()
        except sqlite3.Error as error:
            raise CacheError(f"the CAST cache {self.path} could not be read: {error}") from error
        out: dict[str, Any] = {
            "messages": int(count),
            "bytes": int(size),
            "oldest": oldest,
            "low_seq": self.low_seq,
            "high_seq": self.high_seq,
            "max_bytes": self.max_bytes,
            "retention": self.retention,
            "damaged": self._damage.count,  # messages this open found damaged (checksum), never served
        }
        writes = self._writes
        if writes is not None:
            out.update(stored=writes.stored, duplicates=writes.duplicates, refused=writes.refused,
                       expired=writes.expired, pending=self.pending)
        return out

    # -- the house loop ------------------------------------------------------------

    def _wake_from_writer(self) -> None:
        """On the writer thread: wake the scheduler through the socket pair (no-op without one)."""
        pair = self._wake_pair
        if pair is not None:
            try:
                pair[1].send(b"\0")
            except OSError:
                pass  # full: a wake is pending already; or closed

    def _on_wake(self) -> None:
        pair = self._wake_pair
        if pair is not None:
            try:
                while pair[0].recv(4096):
                    pass
            except OSError:
                pass
        self.complete()

    def _commit_inline(self) -> None:
        writer = self._writer
        if isinstance(writer, InlineWriter):
            writer.commit()
            self.complete()

    def _expire_tick(self) -> None:
        self._expire_timer = None
        if self._closed:
            return
        self.expire()
        self._expire_timer = self.scheduler.call_later(self._expire_every, self._expire_tick)

    def _writable(self) -> None:
        if self._closed:
            raise CacheError(f"the CAST cache {self.path} is closed", "closed")
        if self.readonly:
            raise CacheError(f"the CAST cache {self.path} is open read-only", "read_only")

    def close(self) -> None:
        """Write what is queued, complete its tickets, and let go of the file."""
        if self._closed:
            return
        if self._expire_timer is not None:
            self._expire_timer.cancel()
            self._expire_timer = None
        if self._writer is not None:
            self._writer.close()
            self.complete()
        self._closed = True
        if self._wake_pair is not None:
            if self.scheduler is not None:
                self.scheduler.remove_reader(self._wake_pair[0])
            for end in self._wake_pair:
                end.close()
            self._wake_pair = None
        if self._writes is not None:
            self._writes.conn.close()
        self._reader.close()

    def __enter__(self) -> "Cache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Cache {self.estate!r} {self.path}>"

