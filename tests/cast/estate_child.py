"""The publishing estate abc as a process of its own, for the kill -9 test (tests/cast/test_kill9_road.py).

One manor house (tests/cast/realkit.py) with the SQLite cache in DIR,
joined to xyz at 127.0.0.1:PORT.  Once joined it prints ``ready``, then
publishes COUNT messages ``abc/messages/alice/N`` (N from FIRST) in slices,
printing ``p N IDHEX`` (flushed) before the slice is published and ``a N IDHEX`` only once its
ticket completed without error (after the transaction committed), flushed
at once: the parent kills this process with SIGKILL at some point and then
holds the estate to every ``a`` line it read.  After the last slice it
prints ``done`` and keeps serving subscriptions until SIGTERM.

A restarted publisher first retries what its last incarnation announced
but never saw acknowledged, under the same ids (``N:IDHEX`` arguments), as
a real one would: the cache stores each once (``dup N`` for those it had).

Usage: python -m tests.cast.estate_child DIR PORT FIRST COUNT [N:IDHEX ...]
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from flowcast.cast import new_id
from flowcast.runtime import RealClock, Scheduler, sleep
from tests.cast.realkit import SUBSCRIBE_FROM_XYZ, manor

SLICE = 50


def main(directory: str, port: int, first: int, count: int, retry: list[tuple[int, bytes]]) -> None:
    scheduler = Scheduler(RealClock())
    scheduler.enable_wakeup()
    signal.signal(signal.SIGTERM, lambda *_: scheduler.stop())
    abc = manor("abc", scheduler, Path(directory), policy=[SUBSCRIBE_FROM_XYZ], cache=True)
    road = abc.router.roads["main"]
    out = sys.stdout

    def publish():  # type: ignore[no-untyped-def]
        road.join(("127.0.0.1", port))
        end = time.monotonic() + 20
        while not road.is_allowed("xyz"):
            if time.monotonic() > end:
                out.write("no join\n")
                out.flush()
                scheduler.stop()
                return
            yield sleep(0.01)
        out.write("ready\n")
        out.flush()
        work = [(n, id) for n, id in retry]  # the last incarnation's unacknowledged publishes, same ids
        work += [(n, None) for n in range(first, first + count)]
        for start in range(0, len(work), SLICE):
            chunk = [(n, id if id is not None else new_id()) for n, id in work[start:start + SLICE]]
            # announced before the cache sees them: a kill between a commit and a print hides nothing
            out.write("".join(f"p {n} {id.hex()}\n" for n, id in chunk))
            out.flush()
            tickets = [(n, abc.cast.publish(f"abc/messages/alice/{n}", b"%08d" % n, id=id, publisher="alice"))
                       for n, id in chunk]
            while not all(t.done for _, t in tickets):
                yield sleep(0.002)
            out.write("".join(f"a {n} {t.id.hex()}\n" + (f"dup {n}\n" if t.duplicate else "")
                              for n, t in tickets if t.error is None))
            out.flush()
        out.write("done\n")
        out.flush()

    scheduler.spawn(publish(), name="publish")
    try:
        scheduler.run()
    finally:
        abc.close()
        scheduler.close()


if __name__ == "__main__":
    retry = [(int(n), bytes.fromhex(id)) for n, id in (arg.split(":") for arg in sys.argv[5:])]
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), retry)
