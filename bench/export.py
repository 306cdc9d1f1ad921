"""Cost of recording an event in a house, against a bare list append.

The recorder sits on the hot path of every stack and router, so its cost
per event is what matters: target at most 3 µs per event, all-in (the
tuple, the crash counter, batching, Arrow conversion, the IPC journal and
the final zstd Parquet segment), on this 2 vCPU machine kind.  The
yardstick, measured in the same run, is the least any recorder could do:
append the same event tuple to a Python list.

Figures:
* ``list.append baseline`` -- µs per event;
* ``recorder.message`` -- µs per message event, all-in, with its ratio to
  the 3 µs target and to the baseline;
* ``logged share update`` -- the extra µs a share update costs when the
  share is watched by a recorder (with vs without, same updates);
* ``routed message, recorder cost`` -- the extra µs a router's message
  (routed within one house into a queue share with the default byte budget
  of ``do queue``, as a flow's queue has: two events, ``routed`` and
  ``landed``) costs with ``router.set_events(recorder)``;
* ``routed message, recorder detached`` -- a router that had a recorder and
  was given ``None`` against one that never had one, same messages: what an
  unrecorded router pays for the feature (ratio ``x bare``; 1 is nothing).

Run: ``.venv/bin/python bench/export.py [--json] [--quick] [--events N]``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import Figures, best_of, parser, scratch_dirs, timed  # noqa: E402

from flowcast.behaving.stock import QUEUE_BUDGET  # noqa: E402
from flowcast.export import Recorder  # noqa: E402
from flowcast.routing import Router  # noqa: E402
from flowcast.store import Store  # noqa: E402

TARGET_US = 3.0
SRC = ("counter", "demo", "alpha", "")
DST = "counter/main/beta/"


def run_baseline(n: int) -> float:
    rows: list[tuple] = []
    append = rows.append
    now = 0.0

    def body() -> None:
        for i in range(n):
            append((now, "delivered", None, None, "m", SRC, DST, 100, 0.001, None, None, None, None))

    return timed(body)


def run_recorder(n: int, root: Path) -> float:
    now = [0.0]
    rec = Recorder(root, estate="alpha", house="bench", clock=lambda: now[0], epoch=1.7e9, max_bytes=1 << 40)
    message = rec.message

    def body() -> None:
        for i in range(n):
            message("delivered", "m", SRC, DST, 100, 0.001)
        rec.close()  # the Parquet segment is part of the cost

    return timed(body)


def run_shares(n: int, root: Path | None) -> float:
    store = Store(now=lambda: 0.0)
    share = store.share("bench.value", {"value": 0})
    share.log()
    rec = None
    if root is not None:
        rec = Recorder(root, estate="alpha", house="bench", clock=lambda: 0.0, epoch=1.7e9, max_bytes=1 << 40)
        rec.watch(share)
    update = share.update

    def body() -> None:
        for i in range(n):
            update(value=i)
        if rec is not None:
            rec.close()

    return timed(body)


def run_router(n: int, root: Path | None, detached: bool = False) -> float:
    store = Store(now=lambda: 0.0)
    inbox = store.queue("inbox", budget=QUEUE_BUDGET)  # what 'do queue' declares
    router = Router(store, estate="alpha", yard="bench")
    rec = None
    if root is not None:
        rec = Recorder(root, estate="alpha", house="bench", clock=lambda: 0.0, epoch=1.7e9, max_bytes=1 << 40)
        router.set_events(rec)
        if detached:
            router.set_events(None)
            rec.close()  # not part of what a detached router pays
            rec = None
    send = router.send
    payload = {"n": 1}

    def body() -> None:
        for i in range(n):
            send("inbox", payload, src="out", tag="t")
            if len(inbox.queue) >= 1000:
                inbox.queue.clear()
        if rec is not None:
            rec.close()

    return timed(body)


def main(argv: list[str] | None = None) -> int:
    args_parser = parser(__doc__.splitlines()[0])
    args_parser.add_argument("--events", type=int, default=200_000, help="events per measurement (default 200,000)")
    args = args_parser.parse_args(argv)
    n = 2_000 if args.quick else args.events
    with scratch_dirs("flowcast-bench-export-") as fresh:
        base = best_of(args.repeats, lambda: run_baseline(n)) / n * 1e6
        rec = best_of(args.repeats, lambda: run_recorder(n, fresh())) / n * 1e6
        plain = best_of(args.repeats, lambda: run_shares(n, None)) / n * 1e6
        watched = best_of(args.repeats, lambda: run_shares(n, fresh())) / n * 1e6
        bare = best_of(args.repeats, lambda: run_router(n, None)) / n * 1e6
        recorded = best_of(args.repeats, lambda: run_router(n, fresh())) / n * 1e6
        detached = best_of(args.repeats, lambda: run_router(n, fresh(), detached=True)) / n * 1e6
    figures = Figures("bench/export.py", events=n, repeats=args.repeats, target_us=TARGET_US)
    figures.add("list.append baseline", base, "µs/event")
    figures.add(
        "recorder.message (all-in, to Parquet)", rec, "µs/event",
        ratios={"x target 3 µs": rec / TARGET_US, "x baseline": rec / base},
    )
    figures.add(
        "logged share update, recorder cost", watched - plain, "µs/event",
        ratios={"x target 3 µs": (watched - plain) / TARGET_US, "x baseline": (watched - plain) / base},
        note=f"update alone {plain:.3g} µs",
    )
    figures.add(
        "routed message, recorder cost", recorded - bare, "µs/message",
        ratios={"x target 3 µs per event": (recorded - bare) / 2 / TARGET_US},
        note=f"2 events a message; send and land alone {bare:.3g} µs",
    )
    figures.add(
        "routed message, recorder detached", detached, "µs/message",
        ratios={"x bare": detached / bare}, note=f"never recorded {bare:.3g} µs",
    )
    figures.emit(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
