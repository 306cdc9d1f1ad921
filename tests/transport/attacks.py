"""The memory attacks of issue 10 (part 3), as bodies a joined estate seals and sends.

Shared by tests/transport/test_budget.py (simulated network) and
bench/memory.py (real loopback); and ``offer``, how the road hands a link
an opened body, for the tests that hold ``piece_in`` to the plain way.
"""

from __future__ import annotations

from flowcast.transport.reliable import MIN_PIECE
from flowcast.transport.wire import MSG, SEG, ChunkKind, WireError


def inject_sealed(stack, remote_name: str, body: bytes) -> None:
    """A hostile but joined estate: seal any body in its real session and send it."""
    remote = stack.remote(remote_name)
    _, datagram = remote.session.seal(body)
    stack.port.send(datagram, remote.address)


def offer(link, body, counter: int, now: float, quick: bool) -> str:
    """What the road does with an opened body: ``piece_in`` first (if ``quick``), else handle and received."""
    if quick and link.piece_in(body, counter, now):
        return "quick"
    try:
        link.handle(body, now)
    except WireError:
        return "refused"
    link.received(counter)
    return "handled"


def seg(seq: int, number: int, count: int, piece: bytes, stream: int = 0) -> bytes:
    return SEG.pack(ChunkKind.SEG, 0, stream, seq, number, count, len(piece)) + piece


class Attacks:
    """The three attacks, one per peer, each a generator of bodies for one round."""

    def __init__(self, body_size: int, max_message: int) -> None:
        self.body_size = body_size
        self.max_message = max_message
        self.tiny_seq = 0
        self.never_seq = 0
        self.half_seq = 1  # stream 0 seq 0 never comes: every half piece is held
        self.gap_seq = 1

    def tiny(self) -> list[bytes]:
        """One-byte pieces declaring 2^32-1 segments; then the smallest pieces a message may have."""
        out = [b"".join(seg(s, n, 2**32 - 1, b"t", stream=1) for s in range(4) for n in range(500))]
        count = self.max_message // MIN_PIECE  # the most segments pieces of MIN_PIECE bytes can declare
        per = self.body_size // (SEG.size + MIN_PIECE) - 1
        seq = self.tiny_seq
        out.append(b"".join(seg(seq, number, count, b"t" * MIN_PIECE, stream=1) for number in range(per)))
        # and one-byte last pieces, each of another message that never completes
        per = self.body_size // (SEG.size + 1) - 1
        out.append(b"".join(seg(seq + 1 + k, count - 1, count, b"t", stream=1) for k in range(per)))
        self.tiny_seq += 1 + per
        return out

    def never(self) -> list[bytes]:
        """Big pieces of a message whose last piece never comes."""
        piece = b"n" * (self.body_size - SEG.size - 8)
        seq = self.never_seq
        self.never_seq += 1
        return [seg(seq, number, 40, piece, stream=2) for number in range(8)]

    def half(self) -> list[bytes]:
        """Pieces just over half a datagram, beside a duplicate that fills the rest."""
        half = self.body_size // 2 + 1
        filler = b"f" * (self.body_size - half - SEG.size - MSG.size - 4)
        out = []
        for _ in range(6):
            out.append(seg(self.half_seq, 0, 2, b"h" * half) + MSG.pack(ChunkKind.MSG, 0, 7, 0, len(filler)) + filler)
            self.half_seq += 1
        return out

    def gap(self) -> list[bytes]:
        """Whole messages held for order behind one that never comes (they do not expire)."""
        out = []
        for _ in range(4):
            out.append(MSG.pack(ChunkKind.MSG, 0, 3, self.gap_seq, 20_000) + b"g" * 20_000)
            self.gap_seq += 1
        return out
