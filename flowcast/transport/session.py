"""One established session: per-direction keys, counters and replay window.

A session exists only after a verified INITIATE (responder) or a verified
COOKIE (initiator); nothing unauthenticated creates or changes one.
"""

from __future__ import annotations

from collections.abc import Sequence

from flowcast.transport.crypto import (
    AEGIS_PAD,
    AEGIS_TAG,
    NONCE_PAD,
    SCRATCH_SIZE,
    CryptoError,
    ReplayWindow,
    Scratch,
    _c_aegis_open,
    _c_aegis_seal,
    _c_open,
    _c_seal,
    _NULL,
    open_packet,
    seal,
    seal_aegis,
)
from flowcast.transport.reliable import Link
from flowcast.transport.wire import HEADER, MAGIC, PacketKind

__all__ = ["Session"]

_SEALED = PacketKind.SEALED
_pack = HEADER.pack
_SCRATCH_SIZE = SCRATCH_SIZE


class Session:
    """Keys and counters of one session with one remote."""

    __slots__ = (
        "local_index",
        "remote_index",
        "tx_key",
        "rx_key",
        "counter",
        "window",
        "link",
        "initiator",
        "client_short",
        "confirmed",
        "created",
        "scratch",
        "aegis",
    )

    def __init__(
        self,
        local_index: int,
        remote_index: int | None,
        tx_key: bytes,
        rx_key: bytes,
        link: Link,
        *,
        initiator: bool,
        client_short: bytes,
        created: float,
        scratch: Scratch | None = None,
        aegis: bool = False,
    ) -> None:
        self.local_index = local_index
        self.remote_index = remote_index
        if len(tx_key) != 32 or len(rx_key) != 32:
            raise ValueError("session keys are 32 bytes")
        self.tx_key = tx_key
        self.rx_key = rx_key
        self.counter = 0
        self.window = ReplayWindow()
        self.link = link
        self.initiator = initiator
        self.client_short = client_short  # C': identifies the handshake
        #: Responder: the initiator has been heard in this session.
        #: Initiator: the responder's session id is known.
        self.confirmed = False
        self.created = created
        # The output buffer for small packets: the stack's, shared by its
        # sessions (a stack runs in one thread, and every use copies out at
        # once: seal and open return bytes), else one of its own.
        self.scratch = scratch if scratch is not None else Scratch()
        #: Sealed with AEGIS-256 (both ends have hardware AES), else XSalsa20-Poly1305: crypto.py.
        self.aegis = aegis

    def seal(self, body: bytes) -> tuple[int, bytes]:
        """(counter, datagram) for ``body``; every call uses a new counter."""
        counter, datagrams = self.seal_run((body,))
        return counter, datagrams[0]

    def seal_run(self, bodies: Sequence[bytes]) -> tuple[int, list[bytes]]:
        """(first counter, datagrams) for ``bodies`` sealed in turn under counters in a row.

        A bulk flush seals tens of bodies at once: the lookups are made once
        for them all.  The counters are taken before any is used, so one that
        sealed a datagram never sealed (an error midway) is never used again.
        """
        first = counter = self.counter
        self.counter = first + len(bodies)
        remote_index = self.remote_index
        key = self.tx_key
        scratch = self.scratch
        out, view = scratch.out, scratch.view
        datagrams = []
        append = datagrams.append
        if self.aegis:
            for body in bodies:
                header = _pack(MAGIC, _SEALED, 0, remote_index, counter)
                size = len(body) + AEGIS_TAG
                if size <= _SCRATCH_SIZE and type(body) is bytes:
                    # the per-packet path: keys are 32 bytes and the nonce 32 by construction
                    if _c_aegis_seal(out, _NULL, body, size - AEGIS_TAG, _NULL, 0, _NULL, header + AEGIS_PAD, key) != 0:
                        raise CryptoError("Encryption failed")
                    append(header + view[:size])
                else:
                    append(seal_aegis(key, header, body, scratch))
                counter += 1
            return first, datagrams
        for body in bodies:
            header = _pack(MAGIC, _SEALED, 0, remote_index, counter)
            size = len(body) + 16
            if size <= _SCRATCH_SIZE and _c_seal is not None and type(body) is bytes:
                # the per-packet path: keys are 32 bytes and the nonce 24 by construction
                if _c_seal(out, body, size - 16, header + NONCE_PAD, key) != 0:
                    raise CryptoError("Encryption failed")
                append(header + view[:size])
            else:
                append(seal(key, header, body, scratch))
            counter += 1
        return first, datagrams

    def open(self, datagram: bytes, counter: int) -> bytes | None:
        """The body if authentic and not a replay (then the counter is used up)."""
        if not self.window.check(counter):
            return None
        return self.open_fresh(datagram, counter)

    def open_fresh(self, datagram: bytes, counter: int) -> bytes | None:
        """:meth:`open` for a counter the caller has just checked against the window."""
        body = None  # set by the per-packet way: the scratch buffer, libsodium called direct
        if self.aegis:
            size = len(datagram) - 16 - AEGIS_TAG
            if 0 <= size <= _SCRATCH_SIZE and type(datagram) is bytes:
                scratch = self.scratch
                if _c_aegis_open(scratch.out, _NULL, _NULL, datagram[16:], size + AEGIS_TAG, _NULL, 0, datagram[:16] + AEGIS_PAD, self.rx_key) != 0:
                    return None
                body = scratch.view[:size]
        else:
            size = len(datagram) - 32
            if 0 <= size and size + 16 <= _SCRATCH_SIZE and _c_open is not None and type(datagram) is bytes:
                scratch = self.scratch
                if _c_open(scratch.out, datagram[16:], size + 16, datagram[:16] + NONCE_PAD, self.rx_key) != 0:
                    return None
                body = scratch.view[:size]
        if body is None:  # large, short or not bytes: crypto.py's checked way
            try:
                body = open_packet(self.rx_key, datagram, self.aegis, self.scratch)
            except Exception:  # noqa: BLE001 - CryptoError, or ValueError on short input
                return None
        window = self.window
        if counter == window.highest + 1:  # in order, as nearly every packet: ReplayWindow.accept's one bit, inline
            slot = counter % window.size
            window.seen[slot >> 3] |= 1 << (slot & 7)
            window.highest = counter
        else:
            window.accept(counter)
        return body
