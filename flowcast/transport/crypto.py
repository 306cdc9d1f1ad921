"""Keys, sealing and replay protection.

A session's packets are sealed with one of two AEADs, chosen when the
session is made (both ends agree in the handshake, protocol.md §4):

* **AEGIS-256** where both ends have hardware AES: ~0.45 us for a 1,200-byte
  body against XSalsa20-Poly1305's ~1.5 (and 7 against 38 us for 64 KB),
  which is most of what a full-size datagram costs to seal or open here.
  libsodium's software AES (for CPUs without it) uses tables, open to cache
  timing: so never without hardware on both ends.
* **XSalsa20-Poly1305** (``crypto_secretbox``) otherwise: constant time in
  software everywhere.

Both are reached through PyNaCl's raw cffi module.  Neither gets
associated data: the 16-byte packet header *is* the nonce, zero-padded to
24 (secretbox) or 32 (AEGIS) bytes, so a datagram whose header was altered
fails to open exactly as a wrong tag would.  The header carries a
per-direction counter that never repeats under one key, which keeps nonces
unique.  A session's keys are derived for its cipher (a key is never used
with the other one), and every sealed packet leaves room for the longer
tag (``TAG_ROOM``), so a body fits a datagram whichever cipher seals it.
"""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass

from nacl import bindings as _b
from nacl.exceptions import BadSignatureError, CryptoError
from nacl.signing import SigningKey, VerifyKey

__all__ = [
    "CryptoError",
    "LongTermKeys",
    "fingerprint",
    "seal",
    "open_sealed",
    "box_seal",
    "box_open",
    "verify_signature",
    "derive_session_keys",
    "ReplayWindow",
    "Scratch",
    "NONCE_PAD",
    "MAC_SIZE",
    "AEGIS_TAG",
    "TAG_ROOM",
    "HARDWARE_AES",
    "seal_aegis",
    "open_aegis",
    "open_packet",
]

MAC_SIZE = _b.crypto_secretbox_MACBYTES  # 16
NONCE_PAD = b"\0" * 8
# The per-packet calls go straight to libsodium through PyNaCl's own cffi
# module: its Python wrappers re-check lengths, zero a fresh buffer and
# format an error message on every call -- about 0.8 us per small packet,
# on both sides of every round trip.  Keys and nonces here are always the
# right length (32-byte session keys, 16-byte header + 8-byte pad).
try:
    from nacl._sodium import ffi as _ffi
    from nacl._sodium import lib as _lib

    _alloc = _ffi.new_allocator(should_clear_after_alloc=False)
    _buffer = _ffi.buffer
    _c_seal = _lib.crypto_secretbox_easy
    _c_open = _lib.crypto_secretbox_open_easy
except (ImportError, AttributeError):  # pragma: no cover - an unusual PyNaCl build
    _c_seal = _c_open = None
try:
    _lib.sodium_init()  # CPU features are read here (nacl.bindings did it too): idempotent
    _c_aegis_seal = _lib.crypto_aead_aegis256_encrypt
    _c_aegis_open = _lib.crypto_aead_aegis256_decrypt
    _NULL = _ffi.NULL
    # libsodium offers AES-256-GCM only with hardware AES (AES-NI and PCLMUL, or ARM's crypto
    # extensions): the one way PyNaCl lets us ask whether AES here runs in hardware.
    HARDWARE_AES = _lib.crypto_aead_aes256gcm_is_available() == 1
except (NameError, AttributeError):  # pragma: no cover - PyNaCl older than 1.6 (libsodium < 1.0.19)
    _c_aegis_seal = _c_aegis_open = _NULL = None
    HARDWARE_AES = False
AEGIS_TAG = 32  # libsodium's AEGIS-256 tag
AEGIS_PAD = b"\0" * 16  # header || AEGIS_PAD: the 32-byte nonce
#: What a sealed packet spends on its tag, whichever cipher: the longer one.
TAG_ROOM = AEGIS_TAG
_secretbox = _b.crypto_secretbox_easy
_secretbox_open = _b.crypto_secretbox_open_easy


def fingerprint(verkey: bytes, pubkey: bytes) -> str:
    """The identity of an estate: a hash of both long-term public keys.

    Hex, so it is safe as a file name whatever an estate calls itself.
    """
    return hashlib.blake2b(verkey + pubkey, digest_size=16, person=b"flowcast-fp").hexdigest()


@dataclass(frozen=True)
class LongTermKeys:
    """An estate's long-term Ed25519 signing and X25519 encryption keys."""

    sigseed: bytes  # 32-byte Ed25519 seed
    prikey: bytes  # 32-byte X25519 secret

    @classmethod
    def generate(cls) -> "LongTermKeys":
        return cls(os.urandom(32), os.urandom(32))

    # Derived once per instance (cached_property writes the instance's
    # __dict__, which a frozen dataclass allows): every signed join reply
    # used to derive the Ed25519 key pair twice and the X25519 public key
    # once, ~100 us of a stack's thread per join under a flood.
    @functools.cached_property
    def _signing(self) -> SigningKey:
        return SigningKey(self.sigseed)

    @functools.cached_property
    def verkey(self) -> bytes:
        return bytes(self._signing.verify_key)

    @functools.cached_property
    def pubkey(self) -> bytes:
        return _b.crypto_scalarmult_base(self.prikey)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.verkey, self.pubkey)

    def sign(self, message: bytes) -> bytes:
        """Detached 64-byte Ed25519 signature."""
        return self._signing.sign(message).signature

    def shared(self, remote_pubkey: bytes) -> bytes:
        """Precomputed crypto_box key with a remote X25519 key (≈37 µs; cache it)."""
        return _b.crypto_box_beforenm(remote_pubkey, self.prikey)


def verify_signature(verkey: bytes, message: bytes, signature: bytes) -> bool:
    try:
        VerifyKey(verkey).verify(message, signature)
    except (BadSignatureError, ValueError, TypeError, CryptoError):
        return False
    return True


#: Bodies up to this size are sealed and opened through a session's own
#: preallocated buffer (:class:`Scratch`): no allocation per packet.
SCRATCH_SIZE = 2048


class Scratch:
    """An output buffer a stack's sessions reuse for every small packet.

    Per stack, never shared between stacks: libsodium runs without the GIL,
    so two threads must never write one buffer (a session belongs to one
    stack, and a stack to one thread).  Its contents never outlive a call:
    slicing the view copies them out as bytes.
    """

    __slots__ = ("out", "view")

    def __init__(self) -> None:
        if _c_seal is None:  # pragma: no cover - an unusual PyNaCl build
            self.out = self.view = None
        else:
            self.out = _ffi.new("unsigned char[]", SCRATCH_SIZE)
            self.view = _buffer(self.out)


def seal(key: bytes, header: bytes, body: bytes, scratch: Scratch | None = None) -> bytes:
    """header + secretbox(body) with the header as nonce."""
    nonce = header + NONCE_PAD
    if _c_seal is None or len(key) != 32 or len(nonce) != 24:
        return header + _secretbox(body, nonce, key)
    if type(body) is not bytes:  # cffi takes bytes, not memoryview/bytearray
        body = bytes(body)
    size = len(body) + 16
    if scratch is not None and size <= SCRATCH_SIZE:
        if _c_seal(scratch.out, body, size - 16, nonce, key) != 0:
            raise CryptoError("Encryption failed")
        return header + scratch.view[:size]
    out = _alloc("unsigned char[]", size)
    if _c_seal(out, body, len(body), nonce, key) != 0:
        raise CryptoError("Encryption failed")
    return header + _buffer(out, size)[:]


def open_sealed(key: bytes, header: bytes, ciphertext: bytes, scratch: Scratch | None = None) -> bytes:
    """The body, or CryptoError if anything (header included) was altered."""
    nonce = header + NONCE_PAD
    size = len(ciphertext) - 16
    if _c_open is None or size < 0 or len(key) != 32 or len(nonce) != 24:
        return _secretbox_open(ciphertext, nonce, key)
    if type(ciphertext) is not bytes:  # cffi takes bytes, not memoryview/bytearray
        ciphertext = bytes(ciphertext)
    if scratch is not None and size + 16 <= SCRATCH_SIZE:
        if _c_open(scratch.out, ciphertext, size + 16, nonce, key) != 0:
            raise CryptoError("Decryption failed. Ciphertext failed verification")
        return scratch.view[:size]
    out = _alloc("unsigned char[]", size or 1)
    if _c_open(out, ciphertext, size + 16, nonce, key) != 0:
        raise CryptoError("Decryption failed. Ciphertext failed verification")
    return _buffer(out, size)[:]


def seal_aegis(key: bytes, header: bytes, body: bytes, scratch: Scratch | None = None) -> bytes:
    """header + AEGIS-256(body) with the header as nonce (the caller checked HARDWARE_AES)."""
    if type(body) is not bytes:  # cffi takes bytes, not memoryview/bytearray
        body = bytes(body)
    size = len(body) + AEGIS_TAG
    out = scratch.out if scratch is not None and size <= SCRATCH_SIZE else _alloc("unsigned char[]", size)
    if len(key) != 32 or len(header) != 16 or _c_aegis_seal(out, _NULL, body, size - AEGIS_TAG, _NULL, 0, _NULL, header + AEGIS_PAD, key) != 0:
        raise CryptoError("Encryption failed")
    return header + _buffer(out, size)[:]


def open_aegis(key: bytes, header: bytes, ciphertext: bytes, scratch: Scratch | None = None) -> bytes:
    """The body, or CryptoError if anything (header included) was altered."""
    if type(ciphertext) is not bytes:
        ciphertext = bytes(ciphertext)
    size = len(ciphertext) - AEGIS_TAG
    if size < 0 or len(key) != 32 or len(header) != 16:
        raise CryptoError("Decryption failed. Ciphertext failed verification")
    out = scratch.out if scratch is not None and size <= SCRATCH_SIZE else _alloc("unsigned char[]", size or 1)
    if _c_aegis_open(out, _NULL, _NULL, ciphertext, size + AEGIS_TAG, _NULL, 0, header + AEGIS_PAD, key) != 0:
        raise CryptoError("Decryption failed. Ciphertext failed verification")
    return _buffer(out, size)[:]


def open_packet(key: bytes, datagram: bytes, aegis: bool, scratch: Scratch | None = None) -> bytes:
    """A sealed datagram's body under ``key`` and its session's cipher, or CryptoError."""
    return (open_aegis if aegis else open_sealed)(key, datagram[:16], datagram[16:], scratch)


def box_seal(shared: bytes, nonce: bytes, message: bytes) -> bytes:
    return _b.crypto_box_easy_afternm(message, nonce, shared)


def box_open(shared: bytes, nonce: bytes, ciphertext: bytes) -> bytes:
    return _b.crypto_box_open_easy_afternm(ciphertext, nonce, shared)


def derive_session_keys(shared: bytes, initiator_short: bytes, responder_short: bytes, aegis: bool = False) -> tuple[bytes, bytes]:
    """(initiator→responder key, responder→initiator key) from the short-term DH.

    Both keys depend only on fresh short-term keys, so they are new for every
    session (also across restarts) and die with the short-term secrets:
    forward secrecy.  Separate keys per direction keep nonces unique even
    though each side counts from zero.  The cipher is part of the
    derivation: a key is only ever used with the one it was made for.
    """
    material = shared + initiator_short + responder_short
    i2r, r2i = (b"fc-aegis-i2r", b"fc-aegis-r2i") if aegis else (b"fc-sess-i2r", b"fc-sess-r2i")
    forward = hashlib.blake2b(material, digest_size=32, person=i2r).digest()
    backward = hashlib.blake2b(material, digest_size=32, person=r2i).digest()
    return forward, backward


class ReplayWindow:
    """Accepts each counter at most once, forever, within one session.

    Counters above ``highest`` slide the window; counters within ``size`` of
    it are checked against a bitmap; anything older is refused.  Refusing
    what is too old (rather than trusting it) is what makes the guarantee
    "forever": an old datagram can never be accepted again, at the price of
    dropping packets reordered by more than ``size`` (they are resent).

    The bitmap is a ring of ``size`` bits (512 bytes for 4,096 counters, not
    a byte per counter):
    bit ``c % size`` is set once counter ``c`` was accepted, for ``c``
    within ``size`` of ``highest``.  An in-order packet costs one bit store.
    """

    __slots__ = ("size", "highest", "seen")

    def __init__(self, size: int = 4096) -> None:
        if size <= 0:
            raise ValueError("the replay window size must be positive")
        self.size = size
        self.highest = -1
        self.seen = bytearray((size + 7) >> 3)

    def check(self, counter: int) -> bool:
        """True if ``counter`` has not been seen and is not too old (does not record)."""
        offset = self.highest - counter
        if offset < 0:
            return True
        if offset >= self.size:
            return False
        slot = counter % self.size
        return not self.seen[slot >> 3] & (1 << (slot & 7))

    def _clear(self, first: int, count: int) -> None:
        """Clear ``count`` bits from ring slot ``first`` on (no wrap: first + count <= size)."""
        seen = self.seen
        stop = first + count
        while first < stop and first & 7:
            seen[first >> 3] &= ~(1 << (first & 7)) & 0xFF
            first += 1
        whole = (stop - first) >> 3
        if whole:
            seen[first >> 3 : (first >> 3) + whole] = bytes(whole)
            first += whole << 3
        while first < stop:
            seen[first >> 3] &= ~(1 << (first & 7)) & 0xFF
            first += 1

    def accept(self, counter: int) -> bool:
        """Record ``counter``; False (and nothing recorded) if it is a replay."""
        highest = self.highest
        size = self.size
        seen = self.seen
        if counter > highest:
            shift = counter - highest
            if shift > 1:
                # forget the slots of counters now too old (they are reused
                # by highest+1 .. counter-1, none of them seen yet)
                if shift >= size:
                    seen[:] = bytes(len(seen))
                else:
                    first = (highest + 1) % size
                    stop = first + shift - 1
                    if stop <= size:
                        self._clear(first, shift - 1)
                    else:
                        self._clear(first, size - first)
                        self._clear(0, stop - size)
            slot = counter % size
            seen[slot >> 3] |= 1 << (slot & 7)
            self.highest = counter
            return True
        if highest - counter >= size:
            return False
        slot = counter % size
        bit = 1 << (slot & 7)
        if seen[slot >> 3] & bit:
            return False
        seen[slot >> 3] |= bit
        return True
