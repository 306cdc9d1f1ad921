"""Send-path benchmark: Link CPU per message sent and acknowledged, in one process.

The companion of bench/receive.py, for the same reason: bench/road.py's
two-process figures move by more than the send path's own cost changes
on a shared box, so a change to the link's sending half (sender.py,
recovery.py, outgoing.py) is measured here, on CPU time, best of many
short runs.  Each run submits the messages, builds every body, records
each as sent, and feeds back the ACK a receiver would send (one range,
one stream: the usual one), so the books of packets in flight and of
messages delivered are paid as a road pays them.  Figures, each with its
ratio to the floor -- the same messages chunked and packed into bodies by
a bare loop (what any sender must do, with no books):

* ``send_100B``        100-byte messages, 100 per ACK, many a datagram (ns per message)
* ``send_100B_each``   one 100-byte message per packet and per ACK: request/reply (ns per message)
* ``send_64KiB_1200``  64 KiB messages in 1,200-byte datagrams: ~60 segments a message (us per message)

Run: ``.venv/bin/python bench/send.py [--json] [--quick] [--repeats N]``.
"""

from __future__ import annotations

import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import Figures, cpu_per_message, parser  # noqa: E402

from flowcast.transport.reliable import Link, Outgoing  # noqa: E402
from flowcast.transport.wire import ACK, ACK_STREAM, ACK_RANGE, MSG, SEG, ChunkKind  # noqa: E402

LOOPBACK_BODY = 65535 - 100  # about what a road session's body holds on loopback
SMALL_BODY = 1200 - 40
# An ACK of one range and one stream, as a receiver writes it.
_ACK_ONE = struct.Struct("!" + ACK.format.lstrip("!") + ACK_RANGE.format.lstrip("!") + ACK_STREAM.format.lstrip("!")).pack


def send(size: int, count: int, max_body: int, batch: int) -> int:
    """Send ``count`` messages ``batch`` at a time, each batch acknowledged; how many were delivered."""
    delivered = [0]

    def completed(msg: Outgoing) -> None:
        delivered[0] += msg.delivered

    sender = Link(max_body, lambda *a: None, completed, max_cwnd=1 << 40)
    sender.peer_window = 1 << 40
    data = b"x" * size
    counter = 0
    submitted = 0
    build, sent, submit, handle = sender.build, sender.sent, sender.submit, sender.handle
    while submitted < count:
        for _ in range(batch):
            submit(Outgoing(data), 0.0)
        submitted += batch
        while (built := build()) is not None:
            counter += 1
            sent(counter, len(built[0]), built[1], 0.0)
        handle(_ACK_ONE(ChunkKind.ACK, 0, 1, 1, 1 << 30, 1, counter, 0, submitted), 0.0)
    return delivered[0]


def floor(size: int, count: int, max_body: int, batch: int) -> int:
    """The same messages chunked and packed into bodies, nothing else: what any sender does."""
    data = b"x" * size
    pack_msg, pack_seg = MSG.pack, SEG.pack
    segsize = max_body - SEG.size - 64
    bodies = 0
    seq = 0
    while seq < count:
        parts: list = []
        room = max_body
        for _ in range(batch):
            if size <= max_body - 64 - MSG.size:
                chunk = pack_msg(ChunkKind.MSG, 0, 0, seq, size) + data
                if len(chunk) > room:
                    b"".join(parts)
                    bodies += 1
                    parts, room = [], max_body
                parts.append(chunk)
                room -= len(chunk)
            else:
                view = memoryview(data)
                nseg = -(-size // segsize)
                for sn in range(nseg):
                    piece = view[sn * segsize : (sn + 1) * segsize]
                    b"".join([pack_seg(ChunkKind.SEG, 0, 0, seq, sn, nseg, len(piece)), piece])
                    bodies += 1
            seq += 1
        if parts:
            b"".join(parts)
            bodies += 1
    return seq


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.set_defaults(repeats=20)
    args = p.parse_args(argv)
    quick = args.quick
    repeats = 2 if quick else args.repeats
    figures = Figures("send", quick=quick, repeats=repeats)
    cases = (
        ("send_100B", 100, 2_000 if quick else 100_000, LOOPBACK_BODY, 100, 1e9, "ns"),
        ("send_100B_each", 100, 200 if quick else 20_000, LOOPBACK_BODY, 1, 1e9, "ns"),
        ("send_64KiB_1200", 65536, 5 if quick else 100, SMALL_BODY, 1, 1e6, "us"),
    )
    for name, size, count, max_body, batch, scale, unit in cases:
        spent = cpu_per_message(lambda: send(size, count, max_body, batch), count, repeats)
        bare = cpu_per_message(lambda: floor(size, count, max_body, batch), count, repeats)
        figures.add(
            name,
            spent * scale,
            f"{unit}/msg CPU",
            ratios={"x floor": spent / bare},
            note=f"{count:,} msgs, {batch} per ACK; floor {bare * scale:.3g} {unit}/msg; best of {repeats}",
        )
    figures.emit(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
