"""Topic messages: the canonical body, its content hash, its signature (docs/causal.md, "Encoding").

Why one canonical encoding: the id of a message is the hash of its bytes,
so two implementations (or two versions of this one) agree on an id only
if they encode the same message to the same bytes.  The decoder therefore
re-encodes what it read and refuses anything that is not byte-identical:
there is exactly one wire form of each message, and a relay cannot be fed
a second spelling of a message to get it past the duplicate check.

Why deps carry their signatures: a receiver can check that a dependency's
hash was signed by a publisher of the topic before it asks anyone for it,
so a message naming an id nobody signed is rejected at once instead of
sending every relay off to fetch something that never existed.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import Any, NamedTuple

import msgpack
from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

from flowcast.errors import Error

__all__ = [
    "CausalError",
    "EPOCH_TAG",
    "HASH_PREFIX",
    "MAX_CONTENT",
    "MAX_DEPS",
    "MAX_TAGS",
    "MAX_WIRE",
    "SIG_PREFIX",
    "TopicMsg",
    "TopicMsgID",
    "VERSION",
    "check_tag",
    "check_topic",
    "content_hash",
    "decode",
    "make",
    "verify_id",
]

VERSION = 1
HASH_PREFIX = b"flowcast/causal/v1\x00"
SIG_PREFIX = b"flowcast/causal/id/v1\x00"
MAX_DEPS = 64
MAX_TAGS = 16
MAX_CONTENT = 65536
MAX_WIRE = 80 << 10
MAX_TOPIC = 200
EPOCH_TAG = "epoch"

_SEGMENT = re.compile(r"[A-Za-z0-9._+-]{1,64}\Z")
_KEY = 32
_SIG = 64


class CausalError(ValueError, Error):
    """A message or topic that breaks the contract; ``reason`` is the counted drop reason."""

    def __init__(self, message: str, reason: str = "malformed") -> None:
        super().__init__(message)
        self.reason = reason


def check_topic(topic: object) -> str:
    """``topic`` if it is 1 to 8 segments of ``[A-Za-z0-9._+-]{1,64}`` joined by ``/``, else CausalError."""
    if not isinstance(topic, str) or not topic or len(topic.encode()) > MAX_TOPIC:
        raise CausalError(f"a topic is a string of 1 to {MAX_TOPIC} bytes, got {str(topic)[:80]!r}", "bad_topic")
    parts = topic.split("/")
    if len(parts) > 8 or not all(_SEGMENT.match(p) for p in parts):
        raise CausalError(
            f"a topic is 1 to 8 segments of [A-Za-z0-9._+-] (1 to 64 each) joined by '/', got {topic[:80]!r}", "bad_topic"
        )
    return topic


def check_tag(tag: object) -> str:
    if not isinstance(tag, str) or not _SEGMENT.match(tag):
        raise CausalError(f"a tag is 1 to 64 of [A-Za-z0-9._+-], got {str(tag)[:80]!r}", "bad_tag")
    return tag


class TopicMsgID(NamedTuple):
    """A signed content hash: what a dependency names.  Equal messages have equal ``hash``."""

    publisher: bytes
    hash: bytes
    hsig: bytes

    def __repr__(self) -> str:
        return f"TopicMsgID({self.publisher[:4].hex()}:{self.hash[:6].hex()})"


class TopicMsg:
    """One decoded message.  ``wire`` is what is stored and sent; ``body`` what was hashed."""

    __slots__ = ("topic", "epoch", "publisher", "deps", "tags", "content", "hash", "hsig", "body", "wire")

    def __init__(self, topic: str, epoch: int, publisher: bytes, deps: tuple[TopicMsgID, ...], tags: tuple[str, ...],
                 content: bytes, hash: bytes, hsig: bytes, body: bytes, wire: bytes) -> None:
        self.topic = topic
        self.epoch = epoch
        self.publisher = publisher
        self.deps = deps
        self.tags = tags
        self.content = content
        self.hash = hash
        self.hsig = hsig
        self.body = body
        self.wire = wire

    @property
    def id(self) -> TopicMsgID:
        return TopicMsgID(self.publisher, self.hash, self.hsig)

    @property
    def prev(self) -> TopicMsgID | None:
        """The publisher's own previous message (its one dep by the same publisher), or None."""
        for dep in self.deps:
            if dep.publisher == self.publisher:
                return dep
        return None

    @property
    def is_genesis(self) -> bool:
        return EPOCH_TAG in self.tags

    def __repr__(self) -> str:
        return f"TopicMsg({self.topic!r}, e{self.epoch}, {self.publisher[:4].hex()}:{self.hash[:6].hex()}, deps={len(self.deps)})"


def content_hash(body: bytes) -> bytes:
    """BLAKE2b-256 of the domain prefix and the canonical body."""
    return hashlib.blake2b(HASH_PREFIX + body, digest_size=32).digest()


def _pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def make(
    key: SigningKey,
    topic: str,
    content: bytes,
    *,
    epoch: int = 0,
    deps: Iterable[TopicMsgID] = (),
    tags: Iterable[str] = (),
) -> TopicMsg:
    """Build and sign a message; raises CausalError for anything outside the contract."""
    check_topic(topic)
    if type(epoch) is not int or not 0 <= epoch < 1 << 63:
        raise CausalError(f"an epoch is an integer in [0, 2**63), got {epoch!r}", "bad_epoch")
    if isinstance(content, (bytearray, memoryview)):
        content = bytes(content)
    if not isinstance(content, bytes) or len(content) > MAX_CONTENT:
        raise CausalError(f"content is bytes of at most {MAX_CONTENT}, got {type(content).__name__}", "bad_content")
    by_hash: dict[bytes, TopicMsgID] = {}
    for dep in deps:
        if not isinstance(dep, TopicMsgID):
            raise CausalError(f"a dep is a TopicMsgID, got {type(dep).__name__}", "bad_dep")
        by_hash[dep.hash] = dep
    ordered = tuple(by_hash[h] for h in sorted(by_hash))
    if len(ordered) > MAX_DEPS:
        raise CausalError(f"a message names at most {MAX_DEPS} deps, got {len(ordered)}", "bad_dep")
    tag_list = tuple(sorted({check_tag(t) for t in ([tags] if isinstance(tags, str) else tags)}, key=str.encode))
    if len(tag_list) > MAX_TAGS:
        raise CausalError(f"a message has at most {MAX_TAGS} tags, got {len(tag_list)}", "bad_tag")
    publisher = bytes(key.verify_key)
    body = _pack([VERSION, topic, epoch, publisher, [[d.publisher, d.hash] for d in ordered], list(tag_list), content])
    digest = content_hash(body)
    hsig = key.sign(SIG_PREFIX + digest).signature
    wire = _pack([body, [d.hsig for d in ordered], hsig])
    if len(wire) > MAX_WIRE:
        raise CausalError(f"a message is at most {MAX_WIRE} bytes on the wire, got {len(wire)}", "too_large")
    return TopicMsg(topic, epoch, publisher, ordered, tag_list, content, digest, hsig, body, wire)


def _bad(why: str) -> CausalError:
    return CausalError(f"not a causal message: {why}", "malformed")


def decode(wire: object) -> TopicMsg:
    """Parse and check the shape and canonical form of ``wire``; signatures are NOT checked here.

    Raises CausalError (``reason`` malformed) for anything else, including
    bytes that decode but are not the one canonical encoding.
    """
    if isinstance(wire, (bytearray, memoryview)):
        wire = bytes(wire)
    if not isinstance(wire, bytes) or len(wire) > MAX_WIRE:
        raise _bad("wire form is bytes of at most 80 KiB")
    try:
        outer = msgpack.unpackb(wire, raw=False, use_list=True, max_array_len=MAX_DEPS + 3, max_map_len=0,
                                max_bin_len=MAX_WIRE, max_str_len=0, max_ext_len=0)
    except Exception as error:  # noqa: BLE001 - msgpack raises several kinds for bad bytes
        raise _bad(f"wire form does not decode ({type(error).__name__})") from None
    if not (isinstance(outer, list) and len(outer) == 3 and isinstance(outer[0], bytes) and isinstance(outer[1], list)
            and isinstance(outer[2], bytes) and len(outer[2]) == _SIG):
        raise _bad("wire form is [body, dep_hsigs, hsig]")
    body, dep_sigs, hsig = outer
    try:
        fields = msgpack.unpackb(body, raw=False, use_list=True, max_array_len=MAX_DEPS, max_map_len=0,
                                 max_bin_len=MAX_CONTENT, max_str_len=MAX_TOPIC, max_ext_len=0)
    except Exception as error:  # noqa: BLE001
        raise _bad(f"body does not decode ({type(error).__name__})") from None
    if not (isinstance(fields, list) and len(fields) == 7):
        raise _bad("body is an array of 7")
    version, topic, epoch, publisher, raw_deps, raw_tags, content = fields
    if version != VERSION or type(version) is not int:
        raise _bad(f"version {version!r} is not {VERSION}")
    try:
        check_topic(topic)
    except CausalError as error:
        raise _bad(str(error)) from None
    if type(epoch) is not int or not 0 <= epoch < 1 << 63:
        raise _bad("epoch is an integer in [0, 2**63)")
    if not isinstance(publisher, bytes) or len(publisher) != _KEY:
        raise _bad("publisher is 32 bytes")
    if not isinstance(raw_deps, list) or len(raw_deps) > MAX_DEPS or len(dep_sigs) != len(raw_deps):
        raise _bad(f"deps are at most {MAX_DEPS}, each with its hsig")
    deps = []
    last = b""
    for pair, sig in zip(raw_deps, dep_sigs):
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], bytes) and len(pair[0]) == _KEY
                and isinstance(pair[1], bytes) and len(pair[1]) == 32 and isinstance(sig, bytes) and len(sig) == _SIG):
            raise _bad("a dep is [publisher 32 bytes, hash 32 bytes] with a 64-byte hsig")
        if pair[1] <= last:
            raise _bad("deps are sorted by hash, each once")
        last = pair[1]
        deps.append(TopicMsgID(pair[0], pair[1], sig))
    if not isinstance(raw_tags, list) or len(raw_tags) > MAX_TAGS:
        raise _bad(f"tags are at most {MAX_TAGS}")
    previous = b""
    for tag in raw_tags:
        if not isinstance(tag, str) or not _SEGMENT.match(tag):
            raise _bad("a tag is 1 to 64 of [A-Za-z0-9._+-]")
        encoded = tag.encode()
        if encoded <= previous:
            raise _bad("tags are sorted, each once")
        previous = encoded
    if not isinstance(content, bytes):
        raise _bad("content is bytes")
    if _pack(fields) != body or _pack(outer) != wire:
        raise _bad("not the canonical encoding")
    return TopicMsg(topic, epoch, publisher, tuple(deps), tuple(raw_tags), content, content_hash(body), hsig, body, wire)


_KEYS: dict[bytes, VerifyKey] = {}


def verify_id(publisher: bytes, hash: bytes, hsig: bytes) -> bool:
    """True if ``hsig`` is ``publisher``'s signature over ``hash`` (one Ed25519 verify)."""
    key = _KEYS.get(publisher)
    if key is None:
        try:
            key = VerifyKey(publisher)
        except Exception:  # noqa: BLE001 - not a point on the curve
            return False
        if len(_KEYS) < 4096:
            _KEYS[publisher] = key
    try:
        key.verify(SIG_PREFIX + hash, hsig)
    except (BadSignatureError, ValueError, TypeError):
        return False
    return True
