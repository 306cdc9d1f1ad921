"""Receive-path benchmark: a link's CPU per message for the bodies it is handed, in one process.

The two-process figures (bench/road.py) move by 10-20% from run to run on a
shared box, more than the receive path's own cost changes; this measures
only what a road does with each opened body -- ``Link.piece_in`` first
(where the checkout has it), else ``Link.handle``, then ``received`` --
over bodies a sending link built beforehand, as a road session would get
them (with the stack's hold budget), best of many short runs.  Figures, each with its ratio to the floor -- the same bodies
cut into chunks and pieces joined by a bare loop (what any receiver must
do, with no order, books or checks):

* ``recv_100B``        100-byte messages, many a datagram (ns per message)
* ``recv_64KiB``       64 KiB messages in loopback-sized datagrams (us per message)
* ``recv_64KiB_1200``  the same in 1,200-byte datagrams: ~60 pieces a message
* ``recv_64KiB_1200_reordered`` the same with each message's pieces reversed
  (all but the last held, counted against the budget: the accounting's cost)

Run: ``.venv/bin/python bench/receive.py [--json] [--quick] [--repeats N]``.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import Figures, cpu_per_message, parser  # noqa: E402

from flowcast.transport.reliable import Link, Outgoing  # noqa: E402

try:
    from flowcast.transport.budget import HoldBudget
except ImportError:  # a checkout from before the hold budget: compare it too
    HoldBudget = None  # type: ignore[assignment,misc]
from flowcast.transport.wire import MSG, RUN, SEG, ChunkKind  # noqa: E402

import msgpack  # noqa: E402

LOOPBACK_BODY = 65535 - 100  # about what a road session's body holds on loopback
SMALL_BODY = 1200 - 40


def bodies(size: int, count: int, max_body: int, reverse: bool = False) -> list[bytes]:
    """What a sending link builds for ``count`` messages of ``size`` bytes (no acknowledgements)."""
    sender = Link(max_body, lambda *a: None, acks=False)
    data = os.urandom(size)
    out: list[bytes] = []
    batches = [count] if size < 1000 else [1] * count  # small ones share datagrams, as a stack packs them
    for batch in batches:
        for _ in range(batch):
            sender.submit(Outgoing(data), 0.0)
        built_now = []
        while (built := sender.build()) is not None:
            built_now.append(bytes(built[0]))
        if reverse:
            built_now.reverse()
        out.extend(built_now)
    return out


def floor(batch: list[bytes]) -> int:
    """Chunks cut and pieces joined, nothing else: what any receiver does."""
    unpack_msg, unpack_seg, unpack_run = MSG.unpack_from, SEG.unpack_from, RUN.unpack_from
    msg_size, seg_size, run_size = MSG.size, SEG.size, RUN.size
    unpackb = msgpack.unpackb
    got = 0
    parts: dict[int, dict[int, bytes]] = {}
    for body in batch:
        off, end = 0, len(body)
        while off < end:
            kind = body[off]
            if kind == ChunkKind.MSG:
                _, _, _, _, length = unpack_msg(body, off)
                off += msg_size
                body[off : off + length]
                got += 1
            elif kind == ChunkKind.RUN:  # messages of a stream in a row: one array of payloads
                _, _, _, _, count, length = unpack_run(body, off)
                off += run_size
                got += len(unpackb(memoryview(body)[off : off + length]))
            else:
                _, _, _, seq, number, count, length = unpack_seg(body, off)
                off += seg_size
                pieces = parts.setdefault(seq, {})
                pieces[number] = memoryview(body)[off : off + length]
                if len(pieces) == count:
                    b"".join([pieces[i] for i in range(count)])
                    del parts[seq]
                    got += 1
            off += length
    return got


def handle(batch: list[bytes], max_body: int) -> int:
    got = [0]

    def deliver(stream: int, flags: int, data: bytes) -> None:
        got[0] += 1

    receiver = Link(max_body, deliver, **({"budget": HoldBudget()} if HoldBudget is not None else {}))
    piece_in = getattr(receiver, "piece_in", None)
    take, received = receiver.handle, receiver.received
    for counter, body in enumerate(batch):
        if piece_in is None or not piece_in(body, counter, 1.0):
            take(body, 1.0)
            received(counter)
    return got[0]


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.set_defaults(repeats=40)
    args = p.parse_args(argv)
    quick = args.quick
    repeats = 2 if quick else args.repeats
    figures = Figures("receive", quick=quick, repeats=repeats)
    cases = (
        ("recv_100B", 100, 2_000 if quick else 100_000, LOOPBACK_BODY, False, 1e9, "ns"),
        ("recv_64KiB", 65536, 20 if quick else 1_000, LOOPBACK_BODY, False, 1e6, "us"),
        ("recv_64KiB_1200", 65536, 5 if quick else 100, SMALL_BODY, False, 1e6, "us"),
        ("recv_64KiB_1200_reordered", 65536, 5 if quick else 100, SMALL_BODY, True, 1e6, "us"),
    )
    for name, size, count, max_body, reverse, scale, unit in cases:
        batch = bodies(size, count, max_body, reverse)
        spent = cpu_per_message(lambda: handle(batch, max_body), count, repeats)
        bare = cpu_per_message(lambda: floor(batch), count, repeats)
        figures.add(
            name,
            spent * scale,
            f"{unit}/msg CPU",
            ratios={"x floor": spent / bare},
            note=f"{count:,} msgs in {len(batch):,} bodies; floor {bare * scale:.3g} {unit}/msg; best of {repeats}",
        )
    figures.emit(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
