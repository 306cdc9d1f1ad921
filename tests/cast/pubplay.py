"""Behaviours for the publish-from-a-worker tests (loaded by generated flows).

``pubplay.feed`` pushes ``count`` items ``{"n": i, "pad": bytes}`` into its
output queue, ``rate`` a second, for ``cast publish`` to take.  ``pubplay.ends`` writes
how each publish ended, one JSON line the moment it is known: an
acknowledgement from its input queue (``{"end": "ack", "id", "seq",
"duplicate", "at"}``) or a refusal from ``errors`` (``{"end": "refused",
"id", "reason", "n", "at"}``).  Both are watchers, so a line is written in
the turn the ticket ends, and the file can be read while the house runs.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import msgpack

from flowcast.behaving.registry import Io, behaviour


def _append(path: str, records: list[dict]) -> None:
    if not records:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, "".join(json.dumps(record) + "\n" for record in records).encode())
    finally:
        os.close(fd)


@behaviour("pubplay.feed")
class Feed:
    """Push ``count`` items ``{"n": i, "pad": ...}`` into the output queue, ``rate`` a second, ``size`` bytes of padding each."""

    def __init__(self, io: Io, count: int, rate: float, size: int = 0) -> None:
        if io.output is None:
            raise ValueError("pubplay feed needs 'to QUEUE'")
        self.io = io
        self.count = count
        self.every = 1.0 / rate
        self.next = 0
        self.pad = b"x" * size
        self.started: float | None = None

    def __call__(self) -> None:
        now = time.monotonic()
        if self.started is None:
            self.started = now
        due = min(self.count, int((now - self.started) / self.every) + 1)
        while self.next < due:
            self.io.output.push({"n": self.next, "pad": self.pad})
            self.next += 1


@behaviour("pubplay.ends")
class Ends:
    """Write each acknowledgement (input queue) and each refusal (``errors`` queue) to ``out``."""

    def __init__(self, io: Io, out: str, errors: str) -> None:
        if io.input is None:
            raise ValueError("pubplay ends needs 'from ACKS'")
        self.out = out
        self.acks = io.store.queue(io.input.name)
        self.errors = io.store.queue(errors)
        self.acks.watchers.append(self._acked)
        self.errors.watchers.append(self._refused)

    def _acked(self, share: Any) -> None:
        records = []
        while share.queue:
            ack = share.queue.popleft()
            records.append({"end": "ack", "id": ack["id"].hex(), "seq": ack["seq"], "duplicate": ack["duplicate"], "at": time.time()})
        _append(self.out, records)

    def _refused(self, share: Any) -> None:
        records = []
        while share.queue:
            report = share.queue.popleft()
            n = msgpack.unpackb(report["data"])["n"]
            records.append({"end": "refused", "id": report["id"].hex(), "reason": report["reason"], "n": n, "at": time.time()})
        _append(self.out, records)

    def __call__(self) -> None:
        return None
