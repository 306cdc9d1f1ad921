"""JoinGate: under load, a JOIN costs nothing until its source proves it receives.

A JOIN is signed, so answering one costs an Ed25519 verification, and an
admitted one a keep record.  A flood of JOINs from fresh keys (or from
spoofed addresses, which never see an answer) used to get exactly that for
every datagram the token bucket let through.  Here, as WireGuard does under
load, a JOIN the gate does not let through is answered with a *cookie*: a
keyed BLAKE2b MAC of the source address under a secret that rotates every
``period`` seconds (the current and the previous secret are accepted).  The
joiner sends its same JOIN again inside a COOKIED_JOIN; the stack checks the
MAC (one BLAKE2b, about a microsecond), and only then verifies the
signature, touches the keep or makes any state.  The stack remembers
nothing between the two: a spoofed source never gets its cookie, so it
never costs more than the cookie's computation and a 32-byte reply (a JOIN
is at least 640 bytes: no amplification).

``mode`` ``"load"`` (the default) lets ``rate`` uncookied JOINs a second
through (a burst of as many) and asks the rest for a cookie, and asks every
JOIN for one while the stack says it is loaded (handshake tokens or keep
writes running low); ``"always"`` asks every JOIN; ``"never"`` none (the
behaviour before the gate, for comparison).
"""

from __future__ import annotations

import hashlib
import hmac
import os

from flowcast.runtime.tokenbucket import TokenBucket
from flowcast.transport.wire import HEADER_SIZE, PacketKind, pack_header

__all__ = ["JoinGate", "COOKIE_LEN", "build_join_cookie", "parse_join_cookie", "wrap_join", "MODES"]

COOKIE_LEN = 16
MODES = ("load", "always", "never")


class JoinGate:
    """Stateless address cookies for JOINs, and the rate that decides when to ask."""

    def __init__(self, *, mode: str = "load", rate: float = 50.0, period: float = 120.0) -> None:
        if mode not in MODES:
            raise ValueError(f"join cookies: mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.mode = mode
        self.rate = float(rate)
        self.period = float(period)
        self._secrets = [os.urandom(32), os.urandom(32)]
        self._slot: int | None = None
        self._bucket = TokenBucket(self.rate)  # counts from the first JOIN it is asked about

    def _rotate(self, now: float) -> None:
        slot = int(now // self.period)
        if self._slot is None:
            self._slot = slot
        elif slot != self._slot:
            # One period later: the current secret becomes the previous one.
            # Later still: both are new (no cookie outlives two periods).
            self._secrets = [os.urandom(32), self._secrets[0] if slot == self._slot + 1 else os.urandom(32)]
            self._slot = slot

    def cookie(self, address: object, now: float) -> bytes:
        self._rotate(now)
        return self._mac(self._secrets[0], address)

    def valid(self, address: object, cookie: bytes, now: float) -> bool:
        self._rotate(now)
        return any(hmac.compare_digest(cookie, self._mac(secret, address)) for secret in self._secrets)

    @staticmethod
    def _mac(secret: bytes, address: object) -> bytes:
        return hashlib.blake2b(repr(address).encode(), key=secret, digest_size=COOKIE_LEN).digest()

    def needs_cookie(self, now: float, loaded: bool) -> bool:
        """Must this uncookied JOIN prove its address first?"""
        if self.mode != "load":
            return self.mode == "always"
        if loaded:
            self._bucket.refill(now)
            return True
        return not self._bucket.take(now)


def build_join_cookie(tag: int, cookie: bytes) -> bytes:
    """JOIN_COOKIE: the JOIN's tag and the cookie, nothing else (32 bytes)."""
    return pack_header(PacketKind.JOIN_COOKIE, 0, tag, 0) + cookie


def parse_join_cookie(data: bytes) -> tuple[int, bytes] | None:
    if len(data) != HEADER_SIZE + COOKIE_LEN:
        return None
    return int.from_bytes(data[4:8], "big"), data[HEADER_SIZE:]


def wrap_join(join: bytes, cookie: bytes) -> bytes:
    """COOKIED_JOIN: header, cookie, then the signed JOIN unchanged (no new signature)."""
    return pack_header(PacketKind.COOKIED_JOIN, 0, int.from_bytes(join[4:8], "big"), 0) + cookie + join


def unwrap_join(data: bytes) -> tuple[bytes, bytes] | None:
    """(cookie, JOIN) from a COOKIED_JOIN, else None."""
    if len(data) < HEADER_SIZE + COOKIE_LEN + HEADER_SIZE:
        return None
    return data[HEADER_SIZE : HEADER_SIZE + COOKIE_LEN], data[HEADER_SIZE + COOKIE_LEN :]
