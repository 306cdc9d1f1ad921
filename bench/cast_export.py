"""Cost of exporting CAST's events, against a bare list append and a hook with no listener.

Every message a subscriber hands to the application fires its
``delivered`` hook, so the export's cost per delivery is what matters
(flowcast.export.castevents): the hook's guard, the listener building the
row (hex id, subscription id, latency), ``Recorder.cast``, batching, Arrow
conversion, the journal and the final Parquet segment.  Target as for the
other recorders (bench/export.py): at most 3 µs per event, all-in.

Figures:
* ``list.append baseline`` -- µs per event, the least any recorder could do;
* ``recorder.cast (all-in, to Parquet)`` -- µs per CAST event, ratio to the
  3 µs target and the baseline;
* ``cast delivery, no listener`` -- the firing point with nothing installed
  (one attribute check), µs per delivery;
* ``cast delivery, recorder cost`` -- the extra µs a delivery costs with a
  recorder watching the service (real Hooks, real listener), ratio to the
  3 µs target.

Run: ``.venv/bin/python bench/cast_export.py [--json] [--quick] [--events N]``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import Figures, best_of, parser, scratch_dirs, timed  # noqa: E402

from flowcast.cast.subscriber import HOOKS  # noqa: E402
from flowcast.export import Recorder  # noqa: E402
from flowcast.transport.hooks import Hooks  # noqa: E402

TARGET_US = 3.0
SID = bytes(range(16))
ID = bytes(range(16, 32))


def _recorder(root: Path) -> Recorder:
    return Recorder(root, estate="xyz", house="bob", clock=lambda: 0.0, epoch=1.7e9, max_bytes=1 << 40)


def run_baseline(n: int) -> float:
    rows: list[tuple] = []
    append = rows.append

    def body() -> None:
        for i in range(n):
            append((0.0, "cast-delivered", "0011", "abc", 100, 0.001, i, None, None, "aabb", "abc/m/x", None))

    return timed(body)


def run_recorder(n: int, root: Path) -> float:
    rec = _recorder(root)
    cast = rec.cast
    msg_id, sub = ID.hex(), SID.hex()

    def body() -> None:
        for i in range(n):
            cast("cast-delivered", msg_id, "abc", size=100, latency=0.001, seq=i, sub=sub, name="abc/messages/alice/1")
        rec.close()

    return timed(body)


def run_deliveries(n: int, root: Path | None) -> float:
    """The subscriber's firing point, n times, with or without a recorder on the service."""
    hooks = Hooks(HOOKS, "bench", direct=False)
    clock = SimpleNamespace(now=lambda: 1.0)
    service = SimpleNamespace(router=SimpleNamespace(scheduler=SimpleNamespace(clock=clock)), publisher=None,
                              subscriber=SimpleNamespace(hooks=hooks))
    rec = None
    if root is not None:
        rec = _recorder(root)
        rec.watch_cast(service)
    sub = SimpleNamespace(estate="abc", sid=SID, pattern="abc/messages/**")
    item = {"tag": "cast", "stamp": 0.5, "data": b"x" * 100, "name": "abc/messages/alice/1", "id": ID, "publisher": "alice", "seq": 1}

    def body() -> None:
        for i in range(n):
            if hooks.delivered is not None:
                hooks.delivered(sub, item)
        if rec is not None:
            rec.close()

    return timed(body)


def main(argv: list[str] | None = None) -> int:
    args_parser = parser(__doc__.splitlines()[0])
    args_parser.add_argument("--events", type=int, default=200_000, help="events per measurement (default 200,000)")
    args = args_parser.parse_args(argv)
    n = 2_000 if args.quick else args.events
    with scratch_dirs("flowcast-bench-cast-export-") as fresh:
        base = best_of(args.repeats, lambda: run_baseline(n)) / n * 1e6
        rec = best_of(args.repeats, lambda: run_recorder(n, fresh())) / n * 1e6
        bare = best_of(args.repeats, lambda: run_deliveries(n, None)) / n * 1e6
        recorded = best_of(args.repeats, lambda: run_deliveries(n, fresh())) / n * 1e6
    figures = Figures("bench/cast_export.py", events=n, repeats=args.repeats, target_us=TARGET_US)
    figures.add("list.append baseline", base, "µs/event")
    figures.add("recorder.cast (all-in, to Parquet)", rec, "µs/event",
                ratios={"x target 3 µs": rec / TARGET_US, "x baseline": rec / base})
    figures.add("cast delivery, no listener", bare, "µs/delivery", ratios={"x baseline": bare / base})
    figures.add("cast delivery, recorder cost", recorded - bare, "µs/delivery",
                ratios={"x target 3 µs": (recorded - bare) / TARGET_US}, note=f"firing point alone {bare:.3g} µs")
    figures.emit(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
