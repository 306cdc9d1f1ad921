"""What goes inside a CAST message's ``data`` when it is end to end: signed contact cards and sealed boxes.

Pure functions, no I/O, so every refusal has one place and one reason.
The outer map is what the estates may see (kind, from, to: the same
facts as the message's name, publisher and recipients); everything else
is either public key material, signed, or a ``nacl.public.Box``.

Binding to the CAST name and id: a contact card's signature covers the
name and id it was published under, and a box's sealed payload repeats
them, so the estate that stores and forwards it cannot re-publish either
under another name or id (PyNaCl's Box has no associated data, so the
binding goes inside the box).
"""

from __future__ import annotations

from functools import lru_cache
from hashlib import blake2b
from typing import Any, NamedTuple

import msgpack
from nacl.exceptions import CryptoError
from nacl.public import Box, PrivateKey, PublicKey
from nacl.signing import VerifyKey

from flowcast.cast.identity import IdentityError, UserKeys, check_address
from flowcast.errors import Error
from flowcast.transport.wire import unpack_untrusted

__all__ = ["Card", "Sealed", "SealError", "card", "read_card", "read_outer", "seal", "open_box", "CARD_KINDS"]

_VERSION = 1
_DOMAIN = "flowcast.cast.contact/1"
_BOX_DOMAIN = "flowcast.cast.box/1"
_BIND = 16
#: request: alice asks bob; accept: bob's answer, carrying his keys.
CARD_KINDS = ("request", "accept")


class SealError(ValueError, Error):
    """Content that cannot be taken: ``reason`` is the word counted (malformed, bad_signature, bad_box, replayed, ...)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class Card(NamedTuple):
    """A verified contact request or acceptance."""

    kind: str
    sender: str
    to: str
    verify: bytes
    box: bytes


class Sealed(NamedTuple):
    """An opened message."""

    sender: str
    to: str
    body: bytes


@lru_cache(maxsize=1024)
def _box(secret: bytes, peer: bytes) -> Box:
    """The Box of a pair of keys: its X25519 agreement is 90% of a 100-byte seal, so it is made once a pair."""
    return Box(PrivateKey(secret), PublicKey(peer))


def _bind(name: str, id: bytes, sender: str, to: str) -> bytes:
    """What a box is sealed for, in 16 bytes at the head of its payload: the name, id and both addresses."""
    return blake2b(_pack([_BOX_DOMAIN, name, id, sender, to]), digest_size=_BIND).digest()  # hashlib's: 25x nacl.hash's call


def _pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def _signed(kind: str, name: str, id: bytes, sender: str, to: str, verify: bytes, box: bytes) -> bytes:
    return _pack([_DOMAIN, kind, name, id, sender, to, verify, box])


def card(kind: str, keys: UserKeys, to: str, name: str, id: bytes) -> bytes:
    """A signed contact card from ``keys``'s user to ``to``, to be published under ``name`` with ``id``.

    No note or greeting: the receiver's key is not known yet, so anything
    more than keys would be user content the estates could read.
    """
    if kind not in CARD_KINDS:
        raise ValueError(f"a card is one of {CARD_KINDS}, not {kind!r}")
    verify, box = bytes(keys.verify_key), bytes(keys.public_key)
    signature = keys.signing.sign(_signed(kind, name, id, keys.address, to, verify, box)).signature
    return _pack({"v": _VERSION, "k": kind, "from": keys.address, "to": to, "sign": verify, "box": box, "sig": signature})


def seal(keys: UserKeys, to: str, peer_box: bytes, name: str, id: bytes, body: bytes) -> bytes:
    """``body`` for ``to`` only, bound to the ``name`` and ``id`` it is published under."""
    inner = _bind(name, id, keys.address, to) + body
    sealed = bytes(_box(bytes(keys.box), peer_box).encrypt(inner))
    return _pack({"v": _VERSION, "k": "msg", "from": keys.address, "to": to, "box": sealed})


def read_outer(data: Any) -> dict[str, Any]:
    """The visible map of an end-to-end message, checked for shape; SealError(malformed) otherwise."""
    if data.__class__ is not bytes:
        raise SealError(f"data is {type(data).__name__}, not bytes", "malformed")
    try:
        outer = unpack_untrusted(data, raw=False, strict_map_key=True)
    except Exception as error:  # noqa: BLE001 - msgpack raises several kinds for garbage
        raise SealError(f"not msgpack ({type(error).__name__})", "malformed") from None
    if not isinstance(outer, dict) or outer.get("v") != _VERSION or outer.get("k") not in (*CARD_KINDS, "msg"):
        raise SealError("not an end-to-end map of version 1 and a known kind", "malformed")
    for key in ("from", "to"):
        try:
            check_address(outer.get(key))
        except IdentityError as error:
            raise SealError(f"{key}: {error}", "malformed") from None
    return outer


def read_card(outer: dict[str, Any], name: str, id: bytes) -> Card:
    """A contact card whose signature holds for the name and id it came under; SealError otherwise."""
    verify, box, signature = (outer.get(k) for k in ("sign", "box", "sig"))
    if not (_bytes(verify, 32) and _bytes(box, 32) and _bytes(signature, 64)):
        raise SealError("a card has sign and box keys of 32 bytes and a signature of 64", "malformed")
    try:
        VerifyKey(verify).verify(_signed(outer["k"], name, id, outer["from"], outer["to"], verify, box), signature)
    except CryptoError:
        raise SealError(f"the {outer['k']} from {outer['from']!r} is not signed by the key it carries (forged, or moved to another name or id)", "bad_signature") from None
    return Card(outer["k"], outer["from"], outer["to"], verify, box)


def open_box(outer: dict[str, Any], keys: UserKeys, peer_box: bytes, name: str, id: bytes) -> Sealed:
    """Open a message with the accepted peer's key; SealError(bad_box, replayed, malformed) otherwise."""
    sealed = outer.get("box")
    if not isinstance(sealed, bytes):
        raise SealError("a message's box is bytes", "malformed")
    try:
        inner = _box(bytes(keys.box), peer_box).decrypt(sealed)
    except CryptoError:
        raise SealError(f"the box from {outer['from']!r} does not open with the keys agreed (tampered, forged or wrong key)", "bad_box") from None
    if inner[:_BIND] != _bind(name, id, outer["from"], outer["to"]):
        raise SealError(f"the box was sealed for another name, id or pair of addresses than {name[:60]!r}", "replayed")
    return Sealed(outer["from"], outer["to"], inner[_BIND:])


def _bytes(value: Any, size: int) -> bool:
    return value.__class__ is bytes and len(value) == size

