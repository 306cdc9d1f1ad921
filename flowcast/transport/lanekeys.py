"""Lane credentials: per-pair, per-direction MAC keys for the yards of one estate.

A lane's socket files keep other users out (0600 in a 0700 directory), but
any process of the same user can bind a yard's path -- a free one, or one
it unlinked from under the live yard -- and the receiver's only check was
the sender's path.  Locality is not trust: every lane datagram now carries
a MAC, and a yard accepts a datagram from path P only if it was made with
the key that the yard named at P shares with it for that direction.

Keys are derived, not stored: the supervisor draws a fresh 32-byte estate
secret when it starts and gives each house only the keys of the pairs it is
part of::

    K(a -> b) = BLAKE2b-256(key=secret, person="flowcast lane", data=len(a)|a|len(b)|b)

so a house holds 2(n-1) keys and never the secret.  House A cannot make a
datagram that C accepts as coming from B (it lacks K(b -> c)), nor one the
workers accept as coming from the manor; and a datagram A sent to B is not
accepted by A as B's (K(a -> b) != K(b -> a)), so a relay cannot reflect.
The secret dies with the supervisor: a new estate run has new keys, so
nothing recorded from an earlier run is ever accepted.

The tag is keyed BLAKE2b (16 bytes) for datagrams shorter than
``POLY_FROM`` and Poly1305 (ChaCha20-Poly1305 with the datagram as
associated data and no message, libsodium through PyNaCl) from there up:
BLAKE2b is the cheapest for the small datagrams of a round trip (0.3 us for
100 bytes on the shared test box, against 2.8 us for a call into
libsodium), Poly1305 for the large ones a batch of messages fills (20 us
against 62 us for 64 KiB).  Both ends choose by the datagram's length, so
no flag says which.  A lane authenticates, it does not hide (see
docs/protocol.md section 9 for what that does and does not protect
against).

Poly1305 needs a nonce that never repeats under one key: it is the
datagram's sequence number.  A key K(a -> b) seals only in yard a's one
live stack (the supervisor restarts a house only after it reaped the old
process, and the keys die with the supervisor), and that stack's sequence
numbers rise strictly from ``CLOCK_MONOTONIC`` read when it was made -- a
clock that is one for the whole host and, since sealing takes far longer
than a nanosecond, never fallen behind by the old incarnation's last
number.  So (key, nonce) is never used twice.  Anything else that holds a
yard's keys (a client of the future) must keep to the same rule: one
sealing stack per yard at a time.

A future client in another process or language joins a
lane the same way: the supervisor (or an operator tool) hands it its pair
keys, and the yards list it by name.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Iterable, Mapping
from typing import Any

from nacl.bindings import crypto_aead_chacha20poly1305_ietf_encrypt as _chacha_poly

from flowcast.transport.keep import validate_name

__all__ = ["LaneKeys", "YardMac", "seal", "check", "FORGED", "REPLAYED", "SECRET_SIZE", "KEY_SIZE", "TAG_SIZE", "SEQ_SIZE", "TRAILER_SIZE", "POLY_FROM", "new_secret", "pair_key"]

SECRET_SIZE = 32
KEY_SIZE = 32
TAG_SIZE = 16
SEQ_SIZE = 8
#: What an authenticated lane datagram carries after its chunks: seq (u64) || tag.
TRAILER_SIZE = SEQ_SIZE + TAG_SIZE
_PERSON = b"flowcast lane"
_POLY_PERSON = b"flowcast lane cp"
#: Datagrams whose authenticated part (everything before the tag) is this
#: long or longer are tagged with Poly1305, shorter ones with BLAKE2b: the
#: two cost the same near 3-4 KiB through PyNaCl (whose call costs ~2.5 us
#: and takes only bytes, so the receiver copies what it checks).
POLY_FROM = 4096
_NONCE_PAD = bytes(4)
_EMPTY = b""


def new_secret() -> bytes:
    """A fresh estate lane secret (what a supervisor draws at start)."""
    return os.urandom(SECRET_SIZE)


def pair_key(secret: bytes, sender: str, receiver: str) -> bytes:
    """The MAC key of datagrams from yard ``sender`` to yard ``receiver``.

    Names are length-prefixed so no two pairs share an encoding
    ("ab"+"c" and "a"+"bc" differ).
    """
    if len(secret) != SECRET_SIZE:
        raise ValueError(f"a lane secret is {SECRET_SIZE} bytes, not {len(secret)}")
    a, b = sender.encode(), receiver.encode()
    data = len(a).to_bytes(2, "big") + a + len(b).to_bytes(2, "big") + b
    return hashlib.blake2b(data, key=secret, person=_PERSON, digest_size=KEY_SIZE).digest()


class LaneKeys:
    """One yard's lane credentials: per other yard, the key to send and the key to hear.

    ``send[y]`` makes the tag of datagrams this yard sends to ``y``;
    ``hear[y]`` checks those that come from ``y``.  A LaneStack given keys
    accepts datagrams only from the yards listed here.
    """

    __slots__ = ("yard", "send", "hear")

    def __init__(self, yard: str, send: Mapping[str, bytes], hear: Mapping[str, bytes]) -> None:
        validate_name(yard, "yard name")
        for table in (send, hear):
            for name, key in table.items():
                validate_name(name, "yard name")
                if not isinstance(key, bytes) or len(key) != KEY_SIZE:
                    raise ValueError(f"lane key for yard {name!r} must be {KEY_SIZE} bytes")
        if set(send) != set(hear):
            raise ValueError("lane keys must name the same yards to send to and hear from")
        self.yard = yard
        self.send = dict(send)
        self.hear = dict(hear)

    @classmethod
    def derive(cls, secret: bytes, yard: str, yards: Iterable[str]) -> LaneKeys:
        """``yard``'s keys for talking with every other yard in ``yards``."""
        others = [y for y in yards if y != yard]
        return cls(
            yard,
            {y: pair_key(secret, yard, y) for y in others},
            {y: pair_key(secret, y, yard) for y in others},
        )

    @property
    def yards(self) -> list[str]:
        return list(self.send)

    def to_json(self) -> dict[str, Any]:
        """A JSON-able form, for handing to a house through its stdin pipe."""
        return {
            "yard": self.yard,
            "send": {y: k.hex() for y, k in self.send.items()},
            "hear": {y: k.hex() for y, k in self.hear.items()},
        }

    @classmethod
    def from_json(cls, doc: Any) -> LaneKeys:
        """The inverse of :meth:`to_json`; ValueError for anything malformed."""
        try:
            return cls(
                doc["yard"],
                {str(y): bytes.fromhex(k) for y, k in doc["send"].items()},
                {str(y): bytes.fromhex(k) for y, k in doc["hear"].items()},
            )
        except (KeyError, TypeError, AttributeError) as error:
            raise ValueError(f"malformed lane keys: {error}") from None

    def __repr__(self) -> str:  # never the keys themselves: they end up in logs
        return f"LaneKeys({self.yard!r}, yards={sorted(self.send)!r})"


class YardMac:
    """The MAC keys for one other yard, and the newest sequence number heard from it.

    The BLAKE2b states are keyed once (the key block is hashed here) and
    copied per datagram: a copy and one update cost less than keying
    afresh.  Poly1305 runs under a key derived from the pair key, so no
    key serves two algorithms.
    """

    __slots__ = ("tx", "rx", "tx_poly", "rx_poly", "heard")

    def __init__(self, send_key: bytes, hear_key: bytes, floor: int) -> None:
        self.tx = hashlib.blake2b(key=send_key, digest_size=TAG_SIZE)
        self.rx = hashlib.blake2b(key=hear_key, digest_size=TAG_SIZE)
        self.tx_poly = _poly_key(send_key)
        self.rx_poly = _poly_key(hear_key)
        self.heard = floor


def _poly_key(key: bytes) -> bytes:
    return hashlib.blake2b(key=key, person=_POLY_PERSON, digest_size=KEY_SIZE).digest()


#: What :func:`check` answers for a datagram that must be dropped.
FORGED = -1
REPLAYED = -2


def seal(mac: YardMac, head: bytes, body: bytes, seq: int) -> bytes:
    """``head || body || seq || tag``: what goes on the lane, built with one join.

    The header and chunks come separately so BLAKE2b hashes them where they
    are and the datagram is copied once; Poly1305 (through PyNaCl, bytes
    only) needs them joined first.
    """
    tail = seq.to_bytes(SEQ_SIZE, "big")
    if len(head) + len(body) + SEQ_SIZE >= POLY_FROM:
        signed = b"".join((head, body, tail))
        return signed + _chacha_poly(_EMPTY, signed, _NONCE_PAD + tail, mac.tx_poly)
    h = mac.tx.copy()
    h.update(head)
    h.update(body)
    h.update(tail)
    return b"".join((head, body, tail, h.digest()))


def check(mac: YardMac, data: bytes) -> int:
    """Where the chunks of ``data`` end if its tag is good and its seq new, else FORGED / REPLAYED.

    The tag is checked before anything of the datagram is read.  Sequence
    numbers must rise strictly per sender: Unix datagrams from one socket
    arrive in order, so anything not newer is a copy.
    """
    signed = len(data) - TAG_SIZE
    end = signed - SEQ_SIZE
    if end < 0:
        return FORGED
    if signed >= POLY_FROM:
        tag = _chacha_poly(_EMPTY, bytes(data[:signed]), _NONCE_PAD + bytes(data[end:signed]), mac.rx_poly)
    else:
        h = mac.rx.copy()
        h.update(memoryview(data)[:signed])
        tag = h.digest()
    if not hmac.compare_digest(tag, data[signed:]):
        return FORGED
    seq = int.from_bytes(data[end:signed], "big")
    if seq <= mac.heard:
        return REPLAYED
    mac.heard = seq
    return end
