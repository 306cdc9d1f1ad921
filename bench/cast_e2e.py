"""CAST end to end: what sealing costs a user's messages, against plain CAST and a bare NaCl box in the same run.

Figures (one line each; ``--json`` prints one object instead), 100-byte bodies:

* ``cast_e2e_seal_100B``  messages sealed per second by
  ``flowcast.cast.sealing.seal`` (the box, the name and id inside it, the
  visible map around it); ratio ``x raw box``: against
  ``nacl.public.Box.encrypt`` of the same 100 bytes, so the rest is what
  flowcast's framing costs.
* ``cast_e2e_open_100B``  the receiving side: ``read_outer`` then
  ``open_box`` (decrypt, check the name, id and addresses); ratio ``x raw
  box`` against ``Box.decrypt``.
* ``cast_e2e_publish_100B``  acknowledged durable publishes per second of
  sealed messages, sealing included (``Cache.publish``, ``--window`` in
  flight, ``synchronous=FULL``); ratio ``x plain``: plain 100-byte
  publishes into a fresh cache, rounds alternating so both see the same
  load on a shared machine, best of each.
* ``cast_e2e_bytes_per_message``  cache bytes on disk per sealed message;
  ratio ``x plain`` against the plain messages' cache.

Run: ``.venv/bin/python bench/cast_e2e.py [--json] [--quick] [--count N]``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import Figures, best_of, parser, timed  # noqa: E402

from nacl.public import Box  # noqa: E402

from flowcast.cast import Cache, UserKeys  # noqa: E402
from flowcast.cast.ids import new_id  # noqa: E402
from flowcast.cast.sealing import open_box, read_outer, seal  # noqa: E402

SIZE = 100
BODY = b"x" * SIZE
ALICE = UserKeys.generate("alice", "abc")
BOB = UserKeys.generate("bob", "xyz")
BOB_BOX = bytes(BOB.public_key)
ALICE_BOX = bytes(ALICE.public_key)


def _names(count: int) -> list[tuple[str, bytes]]:
    ids = [new_id() for _ in range(count)]
    return [(f"abc/messages/alice/{id.hex()}", id) for id in ids]


def rate(count: int, repeats: int, fn: Callable[[], object]) -> float:
    return count / best_of(repeats, lambda: timed(fn))


def publish(path: Path, items: list[tuple[str, bytes]], make: Callable[[str, bytes], bytes], window: int) -> tuple[float, float]:
    """Acknowledged publishes per second (``make`` included) and cache bytes per message."""
    cache = Cache.open(path, estate="abc", max_bytes=1 << 40)
    tickets: list = []

    def body() -> None:
        in_flight: list = []
        for name, id in items:
            in_flight.append(cache.publish(name, make(name, id), id=id, publisher="alice", recipients=["bob@xyz"]))
            if len(in_flight) >= window:
                cache.wait(30.0)
                tickets.extend(t for t in in_flight if t.done)
                in_flight = [t for t in in_flight if not t.done]
        cache.flush(120.0)
        tickets.extend(in_flight)

    try:
        seconds = timed(body)
        bad = [t for t in tickets if not t.done or t.error is not None]
        if len(tickets) != len(items) or bad:
            raise RuntimeError(f"{len(tickets) - len(bad)} of {len(items)} publishes acknowledged")
        cache._writes.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        size = sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
    finally:
        cache.close()
    return len(items) / seconds, size / len(items)


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=None, help="messages per figure (default 100,000; --quick 2,000)")
    p.add_argument("--window", type=int, default=4000, help="publishes in flight (default 4,000)")
    args = p.parse_args(argv)
    count = args.count or (2_000 if args.quick else 100_000)
    repeats = 1 if args.quick else args.repeats
    figures = Figures("cast_e2e", count=count, window=args.window, size=SIZE, repeats=repeats)

    items = _names(count)
    box, back = Box(ALICE.box, BOB.public_key), Box(BOB.box, ALICE.public_key)
    sealed = [seal(ALICE, "bob@xyz", BOB_BOX, name, id, BODY) for name, id in items]
    raw = [box.encrypt(BODY) for _ in range(count)]
    ours_seal = rate(count, repeats, lambda: [seal(ALICE, "bob@xyz", BOB_BOX, name, id, BODY) for name, id in items])
    raw_seal = rate(count, repeats, lambda: [box.encrypt(BODY) for _ in range(count)])
    ours_open = rate(count, repeats, lambda: [open_box(read_outer(data), BOB, ALICE_BOX, name, id) for data, (name, id) in zip(sealed, items)])
    raw_open = rate(count, repeats, lambda: [back.decrypt(data) for data in raw])

    work = Path(tempfile.mkdtemp(prefix="flowcast-bench-cast-e2e-"))
    best = {"sealed": (0.0, 0.0), "plain": (0.0, 0.0)}
    try:
        for round_ in range(repeats):
            for kind, make in (("sealed", lambda name, id: seal(ALICE, "bob@xyz", BOB_BOX, name, id, BODY)),
                               ("plain", lambda name, id: BODY)):
                got = publish(work / f"{kind}{round_}.sqlite3", items, make, args.window)
                best[kind] = (max(best[kind][0], got[0]), got[1])
    finally:
        shutil.rmtree(work, ignore_errors=True)

    figures.add("cast_e2e_seal_100B", ours_seal, "msgs/s", ratios={"x raw box": ours_seal / raw_seal}, note=f"raw box {raw_seal:.4g} msgs/s",
                extra={"peer": {"raw_box_encrypt_100B": raw_seal}})
    figures.add("cast_e2e_open_100B", ours_open, "msgs/s", ratios={"x raw box": ours_open / raw_open}, note=f"raw box {raw_open:.4g} msgs/s",
                extra={"peer": {"raw_box_decrypt_100B": raw_open}})
    figures.add("cast_e2e_publish_100B", best["sealed"][0], "msgs/s", ratios={"x plain": best["sealed"][0] / best["plain"][0]},
                note=f"plain {best['plain'][0]:.4g} msgs/s", extra={"acknowledged": "committed, synchronous=FULL; sealing included"})
    figures.add("cast_e2e_bytes_per_message", best["sealed"][1], "B", ratios={"x plain": best["sealed"][1] / best["plain"][1]},
                note=f"plain {best['plain'][1]:.4g} B")
    figures.emit(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
