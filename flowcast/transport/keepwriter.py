"""KeepWriter: the keep's file writes on a thread of their own, in batches.

A join used to write its keep record on the stack's thread: a temporary
file, an fsync of it, a rename and an fsync of the directory, 2-5 ms of
disk per join during which no datagram of any session was read.  A flood of
joins froze every established session.  Here the stack only queues the
bytes (``submit``, microseconds) and goes on; this thread takes whatever is
queued as one batch, writes and fsyncs each file, renames them into place
and fsyncs each directory once for the whole batch.  ``durable`` then
says which tickets are on disk, and every listener is called (from this
thread: a listener must only wake its stack, see RoadStack) so the stack
acknowledges joins whose records are durable -- never before.

The queue is bounded: a stack asks ``room()`` before it admits a join and
drops the join (counted; the joiner repeats it) when the disk is behind,
so memory stays bounded however fast joins come.  A write submitted with
``sync=False`` (a pending record from an unknown key: nobody is told it is
durable) is renamed into place without any fsync: it costs the page cache,
not the disk, and a crash may lose it or leave it damaged (the keep then
ignores it).  A batch that fails
(a full disk, a directory briefly gone) is written again after a back-off
that doubles from ``backoff`` up to ``backoff_max``, ``retries`` times at
most; ``durable`` does not move meanwhile, so nothing is acknowledged as
durable that is not, and ``failures`` counts the failed attempts.  Only a
batch that fails every retry stops the writer for good: ``error`` says
why, ``room()`` is 0 (joins are dropped, counted) and ``submit`` raises,
so no caller queues writes that nobody will take.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from flowcast.runtime.durable import atomic_write, fsync_dir

__all__ = ["KeepWriter"]

log = logging.getLogger(__name__)


class KeepWriter:
    """Batched, durable file writes for one keep, off the callers' thread."""

    def __init__(
        self,
        *,
        limit: int = 4096,
        batch: int = 512,
        name: str = "keep-writer",
        retries: int = 8,
        backoff: float = 0.05,
        backoff_max: float = 5.0,
    ) -> None:
        self.limit = limit
        self.batch = batch
        self.retries = retries
        self.backoff = backoff
        self.backoff_max = backoff_max
        #: Failed write attempts (each retried until ``retries`` run out).
        self.failures = 0
        self._queue: list[tuple[int, Path, bytes | None, bool]] = []
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._ticket = 0
        #: Every ticket up to this one is on disk (read from any thread: an int).
        self.durable = 0
        #: Why the writer stopped for good (every retry of a batch failed); None while it writes.
        self.error: OSError | None = None
        self.batches = 0
        self.written = 0
        self._listeners: list[Callable[[], None]] = []
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def listen(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (on the writer's thread) after each durable batch."""
        self._listeners.append(callback)

    def unlisten(self, callback: Callable[[], None]) -> None:
        if callback in self._listeners:
            self._listeners.remove(callback)

    def room(self) -> int:
        """How many more writes the queue takes before the bound."""
        return self.limit - len(self._queue) if self.error is None else 0

    def submit(self, path: Path, data: bytes | None, *, sync: bool = True) -> int:
        """Queue ``data`` for ``path`` (None: delete it); returns its ticket.

        ``sync`` False: no fsync for this write (see the module's docstring).
        """
        with self._lock:
            if self.error is not None:
                raise RuntimeError(f"the keep writer failed for good after {self.retries + 1} attempts: {self.error}")
            if self._closed:
                raise RuntimeError("the keep writer is closed")
            self._ticket += 1
            self._queue.append((self._ticket, path, data, sync))
            self._ready.notify()
            return self._ticket

    @property
    def pending(self) -> int:
        return len(self._queue)

    def wait(self, ticket: int, timeout: float = 10.0) -> bool:
        """Block until ``ticket`` is durable (callers off the stack's thread, and tests)."""
        with self._lock:
            return self._ready.wait_for(lambda: self.durable >= ticket or self.error is not None, timeout) and self.durable >= ticket

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued, then stop the thread."""
        with self._lock:
            self._closed = True
            self._ready.notify_all()
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._lock:
                self._ready.wait_for(lambda: self._queue or self._closed)
                if not self._queue and self._closed:
                    return
                taken, self._queue = self._queue[: self.batch], self._queue[self.batch :]
            if not self._write_retrying(taken):
                return
            with self._lock:
                self.durable = taken[-1][0]
                self.batches += 1
                self.written += len(taken)
                self._ready.notify_all()
            for callback in list(self._listeners):
                try:
                    callback()
                except Exception:  # noqa: BLE001 - a listener must not stop the writes
                    log.exception("keep writer listener failed")

    def _write_retrying(self, taken: list[tuple[int, Path, bytes | None, bool]]) -> bool:
        """Write ``taken``, again after a back-off while it fails; False once the writer failed for good."""
        delay = self.backoff
        for attempt in range(self.retries + 1):
            try:
                self._write(taken)
                return True
            except OSError as error:
                with self._lock:
                    self.failures += 1
                    if attempt == self.retries:
                        log.error("keep writes stopped for good after %d attempts: %s", attempt + 1, error)
                        self.error = error
                        self._queue.clear()
                        self._ready.notify_all()
                        return False
                    log.warning("keep write failed (attempt %d of %d), again in %.3g s: %s", attempt + 1, self.retries + 1, delay, error)
                    # close() cuts the wait short; the batch is still tried once more
                    self._ready.wait_for(lambda: self._closed, delay)
                delay = min(delay * 2, self.backoff_max)
        return False  # pragma: no cover - the loop returns

    @staticmethod
    def _write(batch: list[tuple[int, Path, bytes | None, bool]]) -> None:
        # The last write of a path in the batch is the one that counts; it is
        # synced if any write of that path in the batch asked for it.
        final: dict[Path, tuple[bytes | None, bool]] = {}
        for _, path, data, sync in batch:
            held = final.pop(path, None)
            final[path] = (data, sync or (held is not None and held[1]))
        directories: dict[Path, None] = {}
        for path, (data, sync) in final.items():
            if sync:
                directories[path.parent] = None
            if data is None:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
                continue
            atomic_write(path, data, 0o600, sync=sync, sync_dir=False)
        for directory in directories:  # one fsync per directory per batch: the renames and unlinks
            fsync_dir(directory)
