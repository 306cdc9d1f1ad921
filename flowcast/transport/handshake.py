"""Join and allow packets: building, checking, and the responder's cookie jar.

*join* presents an estate's name, role, mode and long-term keys, signed
with its Ed25519 key; the reply (accept, pend or refuse) is signed by the
answering estate and echoes the request's random nonce, so neither can be
forged or replayed into another exchange.

*allow* follows CurveCP: HELLO (initiator short-term key C', a box to the
responder's long-term key S), COOKIE (the responder's short-term key S' and
a cookie -- C' and s' sealed under a minute key -- boxed to C'), INITIATE
(C', the cookie, and a box under C'·S' holding the initiator's long-term key
C and a *vouch*: C' boxed from C to S).  The responder keeps no state before
INITIATE; it learns s' back from the cookie.  Only an INITIATE whose vouch
opens with an *accepted* long-term key creates a session; its keys come from
the short-term DH alone (forward secrecy).  Replayed INITIATEs are refused:
a cookie lives two minute-key periods, and every C' used in that time is
remembered.

All parsers return None on anything malformed; they never raise.
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass

import msgpack
from nacl import bindings as _b

from flowcast.runtime.clock import wall_now
from flowcast.transport.crypto import CryptoError, LongTermKeys, box_open, box_seal, verify_signature
from flowcast.transport.wire import HEADER_SIZE, PacketKind, pack_header

__all__ = [
    "F_AEGIS",
    "JoinRequest",
    "JoinReply",
    "build_join",
    "parse_join",
    "build_join_reply",
    "parse_join_reply",
    "CookieJar",
    "ShortTerm",
    "build_hello",
    "open_hello",
    "build_cookie",
    "open_cookie",
    "build_initiate",
    "Initiate",
    "open_initiate",
    "MAX_JOIN",
    "HELLO_SIZE",
]

MAX_JOIN = 16384  # a join larger than this is dropped unread
#: A JOIN is padded to at least this size and a smaller one is dropped, and
#: every reply is smaller (names <= 64, reason <= 200 bytes): answering a
#: spoofed JOIN never amplifies.
MIN_JOIN = 640
MAX_REASON = 200
_PAD = b"\0" * 8
_HELLO_ZEROS = b"\0" * 128
HELLO_SIZE = HEADER_SIZE + 32 + len(_HELLO_ZEROS) + 16  # 192: never smaller than the COOKIE reply
COOKIE_SIZE = 24 + 72 + 16  # nonce + secretbox(C' + s' + minted)
_INDEX = struct.Struct("!I")
_FLAGS = struct.Struct("!H")
#: Header flag of a COOKIE or INITIATE: its sender has hardware AES, so can seal with AEGIS-256.
#: A session uses AEGIS-256 when both handshake packets carry it (crypto.py says why not otherwise).
F_AEGIS = 0x0004
_MINTED = struct.Struct("!d")


def _random64() -> int:
    return int.from_bytes(os.urandom(8), "big")


# -- join ----------------------------------------------------------------


@dataclass(frozen=True)
class JoinRequest:
    name: object  # validated by the keep, not here
    role: object
    mode: object
    verkey: bytes
    pubkey: bytes
    nonce: bytes
    stamp: float  # the joiner's wall clock: orders JOINs of one key (replays cannot roll back)


@dataclass(frozen=True)
class JoinReply:
    kind: int
    name: object
    role: object
    mode: object
    verkey: bytes
    pubkey: bytes
    nonce: bytes  # echo of the request's
    reason: str
    uid: int


def build_join(keys: LongTermKeys, name: str, role: str, mode: int, nonce: bytes, tag: int, stamp: float | None = None) -> bytes:
    header = pack_header(PacketKind.JOIN, 0, tag, _random64())
    # Wall time on purpose: it orders JOINs of one key across restarts of the
    # joiner, which a clock starting at zero could not.  Only its order counts.
    stamp = wall_now() if stamp is None else float(stamp)
    body = msgpack.packb([name, role, mode, keys.verkey, keys.pubkey, nonce, stamp, b""])
    pad = 0
    while HEADER_SIZE + len(body) + 64 < MIN_JOIN:  # at most twice: a bin header may grow a byte
        pad += MIN_JOIN - (HEADER_SIZE + len(body) + 64)
        body = msgpack.packb([name, role, mode, keys.verkey, keys.pubkey, nonce, stamp, b"\0" * pad])
    return header + body + keys.sign(header + body)


def _conforming(name: object, role: object, mode: object) -> bool:
    """Field types a JOIN or its reply must have (the keep checks the values' spelling).

    ``True`` is an int to Python and to msgpack's reader: refused here, so a
    mode is a number and nothing else.
    """
    return isinstance(name, str) and isinstance(role, str) and type(mode) is int and 0 <= mode < 1 << 16


def _split_signed(data: bytes) -> tuple[bytes, bytes, bytes] | None:
    if len(data) < HEADER_SIZE + 64 + 1 or len(data) > MAX_JOIN:
        return None
    return data[:HEADER_SIZE], data[HEADER_SIZE:-64], data[-64:]


def _unpack_list(body: bytes, length: int) -> list | None:
    try:
        items = msgpack.unpackb(body, raw=False, strict_map_key=True, max_str_len=MAX_JOIN, max_bin_len=MAX_JOIN, max_array_len=16, max_map_len=0)
    except Exception:  # noqa: BLE001 - msgpack raises many types on hostile input
        return None
    if not isinstance(items, list) or len(items) != length:
        return None
    return items


def parse_join(data: bytes) -> JoinRequest | None:
    """A join whose signature verifies with the key it presents, else None."""
    if len(data) < MIN_JOIN:
        return None
    parts = _split_signed(data)
    if parts is None:
        return None
    header, body, signature = parts
    items = _unpack_list(body, 8)
    if items is None:
        return None
    name, role, mode, verkey, pubkey, nonce, stamp, _padding = items
    if not _conforming(name, role, mode) or not isinstance(stamp, (int, float)) or isinstance(stamp, bool):
        return None
    if not math.isfinite(stamp) or stamp < 0:  # +inf would make every later JOIN of the key stale
        return None
    if not (isinstance(verkey, bytes) and len(verkey) == 32 and isinstance(pubkey, bytes) and len(pubkey) == 32):
        return None
    if not (isinstance(nonce, bytes) and len(nonce) == 16):
        return None
    if not verify_signature(verkey, header + body, signature):
        return None
    return JoinRequest(name, role, mode, verkey, pubkey, nonce, float(stamp))


def build_join_reply(kind: int, keys: LongTermKeys, name: str, role: str, mode: int, nonce: bytes, reason: str, uid: int, tag: int) -> bytes:
    header = pack_header(kind, 0, tag, _random64())
    brief = reason.encode()[:MAX_REASON].decode(errors="ignore")
    body = msgpack.packb([name, role, mode, keys.verkey, keys.pubkey, nonce, brief, uid])
    return header + body + keys.sign(header + body)


def clean_reason(text: str) -> str:
    """A peer's free text made safe for events and logs: printable, one line, short."""
    return "".join(ch if ch.isprintable() else "?" for ch in text[:MAX_REASON])


def parse_join_reply(data: bytes) -> JoinReply | None:
    parts = _split_signed(data)
    if parts is None:
        return None
    header, body, signature = parts
    items = _unpack_list(body, 8)
    if items is None:
        return None
    name, role, mode, verkey, pubkey, nonce, reason, uid = items
    if not _conforming(name, role, mode) or type(uid) is not int:
        return None
    if not (isinstance(verkey, bytes) and len(verkey) == 32 and isinstance(pubkey, bytes) and len(pubkey) == 32):
        return None
    if not (isinstance(nonce, bytes) and isinstance(reason, str) and isinstance(uid, int)):
        return None
    if not verify_signature(verkey, header + body, signature):
        return None
    return JoinReply(header[1], name, role, mode, verkey, pubkey, nonce, clean_reason(reason), uid)


# -- allow ---------------------------------------------------------------


class ShortTerm:
    """A fresh X25519 key pair for one handshake; dropped once keys are derived."""

    __slots__ = ("secret", "public", "hello_shared")

    def __init__(self) -> None:
        self.secret = os.urandom(32)
        self.public = _b.crypto_scalarmult_base(self.secret)
        self.hello_shared: bytes | None = None  # K(c', S), computed once per handshake


class CookieJar:
    """The responder's only memory between HELLO and INITIATE.

    Two minute keys (current, previous) rotate every ``lifetime`` seconds of
    the stack's clock and are never written anywhere, so a cookie is good
    for at most two periods and none survives a restart.  ``seen`` remembers
    every initiator short-term key used while its cookie could still open.
    """

    def __init__(self, lifetime: float = 60.0) -> None:
        self.lifetime = lifetime
        self._keys = [os.urandom(32), os.urandom(32)]
        self._rotated: float | None = None
        self._seen: dict[bytes, float] = {}

    def _rotate(self, now: float) -> None:
        if self._rotated is None:
            self._rotated = now
            return
        periods = int((now - self._rotated) // self.lifetime)
        if periods <= 0:
            return
        if periods == 1:
            self._keys = [os.urandom(32), self._keys[0]]
        else:
            self._keys = [os.urandom(32), os.urandom(32)]
        self._rotated += periods * self.lifetime
        horizon = now - 2 * self.lifetime
        self._seen = {key: when for key, when in self._seen.items() if when >= horizon}

    def make(self, now: float, client_short: bytes, server_short_secret: bytes) -> bytes:
        self._rotate(now)
        nonce = os.urandom(24)
        plain = client_short + server_short_secret + _MINTED.pack(now)
        return nonce + _b.crypto_secretbox_easy(plain, nonce, self._keys[0])

    def open(self, now: float, cookie: bytes) -> tuple[bytes, bytes, float] | None:
        """(C', s', time minted) from a cookie this jar made recently, else None."""
        self._rotate(now)
        if len(cookie) != COOKIE_SIZE:
            return None
        for key in self._keys:
            try:
                plain = _b.crypto_secretbox_open_easy(cookie[24:], cookie[:24], key)
            except (CryptoError, ValueError, TypeError):
                continue
            return plain[:32], plain[32:64], _MINTED.unpack_from(plain, 64)[0]
        return None

    def seen(self, client_short: bytes) -> bool:
        return client_short in self._seen

    def remember(self, now: float, client_short: bytes) -> None:
        self._seen[client_short] = now


def build_hello(short: ShortTerm, responder_pubkey: bytes, tag: int) -> bytes:
    header = pack_header(PacketKind.HELLO, 0, tag, _random64())
    if short.hello_shared is None:
        short.hello_shared = _b.crypto_box_beforenm(responder_pubkey, short.secret)
    shared = short.hello_shared
    return header + short.public + box_seal(shared, header + _PAD, _HELLO_ZEROS)


def open_hello(data: bytes, keys: LongTermKeys) -> tuple[int, bytes, bytes] | None:
    """(tag, C', shared C'·s) for a well-formed HELLO made for our key, else None."""
    if len(data) != HELLO_SIZE:
        return None
    header, client_short = data[:HEADER_SIZE], data[HEADER_SIZE : HEADER_SIZE + 32]
    try:
        shared = _b.crypto_box_beforenm(client_short, keys.prikey)
        if box_open(shared, header + _PAD, data[HEADER_SIZE + 32 :]) != _HELLO_ZEROS:
            return None
    except (CryptoError, ValueError, TypeError):
        return None
    return _INDEX.unpack_from(header, 4)[0], client_short, shared


def build_cookie(shared: bytes, tag: int, server_short: ShortTerm, cookie: bytes, aegis: bool = False) -> bytes:
    """COOKIE; ``aegis``: this estate can seal with AEGIS-256 (F_AEGIS, authenticated as the box's nonce)."""
    header = pack_header(PacketKind.COOKIE, F_AEGIS if aegis else 0, tag, _random64())
    return header + box_seal(shared, header + _PAD, server_short.public + cookie)


def open_cookie(data: bytes, short: ShortTerm, responder_pubkey: bytes) -> tuple[bytes, bytes, bool] | None:
    """(S', cookie, whether the responder can seal with AEGIS-256) from a COOKIE answering our HELLO, else None."""
    if len(data) != HEADER_SIZE + 16 + 32 + COOKIE_SIZE:
        return None
    header = data[:HEADER_SIZE]
    try:
        # the key made for HELLO: a flood of fake COOKIEs costs no X25519 each
        shared = short.hello_shared or _b.crypto_box_beforenm(responder_pubkey, short.secret)
        plain = box_open(shared, header + _PAD, data[HEADER_SIZE:])
    except (CryptoError, ValueError, TypeError):
        return None
    return plain[:32], plain[32:], bool(_FLAGS.unpack_from(header, 2)[0] & F_AEGIS)


def build_initiate(
    short: ShortTerm,
    keys: LongTermKeys,
    responder_pubkey: bytes,
    responder_short: bytes,
    cookie: bytes,
    tag: int,
    index: int,
    aegis: bool = False,
) -> bytes:
    """INITIATE; ``index`` is the session id the responder must address us by; ``aegis`` as for COOKIE."""
    header = pack_header(PacketKind.INITIATE, F_AEGIS if aegis else 0, tag, _random64())
    vnonce = os.urandom(24)
    vouch = box_seal(keys.shared(responder_pubkey), vnonce, short.public)
    inner = keys.pubkey + keys.verkey + vnonce + vouch + _INDEX.pack(index)
    shared = _b.crypto_box_beforenm(responder_short, short.secret)
    return header + short.public + cookie + box_seal(shared, header + _PAD, inner)


@dataclass(frozen=True)
class Initiate:
    tag: int
    client_short: bytes
    server_short_secret: bytes
    minted: float  # when the responder made the cookie (its clock)
    client_long: bytes  # initiator's long-term X25519 public key
    client_verkey: bytes  # and its Ed25519 key: together they name the record (fingerprint)
    vnonce: bytes
    vouch: bytes
    index: int
    aegis: bool  # the initiator can seal with AEGIS-256


_INITIATE_SIZE = HEADER_SIZE + 32 + COOKIE_SIZE + 16 + 32 + 32 + 24 + 48 + 4


def open_initiate(data: bytes, now: float, jar: CookieJar) -> Initiate | None:
    """Open cookie and box; the vouch is checked by the caller (it needs the keep)."""
    if len(data) != _INITIATE_SIZE:
        return None
    header = data[:HEADER_SIZE]
    client_short = data[HEADER_SIZE : HEADER_SIZE + 32]
    cookie = data[HEADER_SIZE + 32 : HEADER_SIZE + 32 + COOKIE_SIZE]
    opened = jar.open(now, cookie)
    if opened is None or opened[0] != client_short:
        return None
    server_short_secret, minted = opened[1], opened[2]
    try:
        shared = _b.crypto_box_beforenm(client_short, server_short_secret)
        inner = box_open(shared, header + _PAD, data[HEADER_SIZE + 32 + COOKIE_SIZE :])
    except (CryptoError, ValueError, TypeError):
        return None
    return Initiate(
        _INDEX.unpack_from(header, 4)[0],
        client_short,
        server_short_secret,
        minted,
        inner[:32],
        inner[32:64],
        inner[64:88],
        inner[88:136],
        _INDEX.unpack_from(inner, 136)[0],
        bool(_FLAGS.unpack_from(header, 2)[0] & F_AEGIS),
    )


def check_vouch(initiate: Initiate, long_shared: bytes) -> bool:
    """True if the vouch proves the long-term key holder chose this C'."""
    try:
        return box_open(long_shared, initiate.vnonce, initiate.vouch) == initiate.client_short
    except (CryptoError, ValueError, TypeError):
        return False


def public_of(secret: bytes) -> bytes:
    return _b.crypto_scalarmult_base(secret)


def session_shared(own_short_secret: bytes, peer_short_public: bytes) -> bytes:
    return _b.crypto_box_beforenm(peer_short_public, own_short_secret)
