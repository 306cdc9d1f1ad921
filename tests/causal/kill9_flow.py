"""Behaviours of the estates in tests/causal/test_kill9.py, loaded by the flows that test writes.

Everything an estate there proves is written to files as it happens, one
JSON line per event with a single ``write`` (in the OS once it returns, so
a kill -9 right after cannot take it back): the test reads the files from
outside and holds the estates to them.
"""

from __future__ import annotations

import json
import os
from typing import Any

from flowcast.behaving import Io, behaviour


def _append(path: str, records: list[dict[str, Any]]) -> None:
    if records:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, "".join(json.dumps(r) + "\n" for r in records).encode())
        finally:
            os.close(fd)


@behaviour("kill9.feed")
class Feed:
    """Push ``per_tick`` contents a tick into the output queue (``causal publish`` takes them) until the
    file ``stop`` exists; then write ``done`` into ``acks`` once every publish was acknowledged."""

    def __init__(self, io: Io, stop: str, acks: str, per_tick: int = 4, size: int = 16) -> None:
        if io.output is None or io.input is None:
            raise ValueError("kill9 feed needs 'from ACKS to OUTBOX'")
        self.io, self.stop, self.acks, self.per_tick, self.size = io, stop, acks, per_tick, size
        self.n = 0
        self.acked = 0
        self.done = False

    def __call__(self) -> None:
        acks = self.io.input.queue
        _append(self.acks, [{"hash": ack["hash"], "deps": ack["deps"]} for ack in acks])
        acked = len(acks)
        acks.clear()
        self.acked += acked
        if self.done:
            return
        if os.path.exists(self.stop):
            if self.acked == self.n:
                self.done = True
                _append(self.acks, [{"done": self.n}])
            return
        for _ in range(self.per_tick):
            self.io.output.push(b"%08d" % self.n + b"." * self.size)
            self.n += 1


@behaviour("kill9.record")
class Record:
    """Take every delivery off the input queue and write it down, in the turn that took it."""

    def __init__(self, io: Io, out: str) -> None:
        if io.input is None:
            raise ValueError("kill9 record needs 'from QUEUE'")
        self.io, self.out = io, out

    def __call__(self) -> None:
        queue = self.io.input.queue
        taken = []
        while queue:
            item = queue.popleft()
            taken.append({"hash": item["hash"], "deps": item["deps"], "redelivered": item.get("redelivered", False)})
        _append(self.out, taken)
