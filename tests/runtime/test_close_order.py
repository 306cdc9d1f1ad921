"""Closing a scheduler ends its threads in the order they were spawned.

``Scheduler.close`` cancels every live thread, so their ``finally`` blocks
(a framer's exit acts, a stack's goodbye) run then.  The live threads were
a set, and a set of objects hashed by address iterates in address order:
the exit acts of one run came in an order no seed decides.
"""

from __future__ import annotations

import itertools

import pytest

from flowcast.runtime import Scheduler, VirtualClock, sleep
from flowcast.runtime.scheduler import MicroThread


def test_close_cancels_threads_in_spawn_order(monkeypatch: pytest.MonkeyPatch) -> None:
    # Hashes that fall as threads are made, as addresses may.
    falling = itertools.count()
    hashes: dict[int, int] = {}
    monkeypatch.setattr(MicroThread, "__hash__", lambda self: hashes.setdefault(id(self), 1000 - next(falling)))
    scheduler = Scheduler(VirtualClock())
    ended: list[str] = []

    def body(name: str):  # type: ignore[no-untyped-def]
        try:
            yield sleep(60.0)
        finally:
            ended.append(name)

    names = [f"t{n}" for n in range(6)]
    for name in names:
        scheduler.spawn(body(name), name=name)
    scheduler.run(until=1.0)
    assert ended == []
    scheduler.close()
    assert ended == names
