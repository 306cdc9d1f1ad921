"""CAST names, patterns, the split filter and the authorisation check.

A name is where a message is published (``abc/messages/alice/1``); a
pattern is what a subscription asks for (``abc/messages/*/**``).  Both
arrive from remote estates, so every check here is strict and says what is
wrong: a bad name is refused with :class:`CastNameError`, never guessed at.
Names are never turned into paths.

The split filter runs at the publishing estate: a receiving estate with M
servers subscribes M times with ``(key, M, k)``, so each message crosses the
road once, to the one server whose ``k`` it hashes to.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Literal

from flowcast.errors import Error

__all__ = [
    "MAX_NAME_BYTES",
    "MAX_RECIPIENTS",
    "MAX_SEGMENTS",
    "MAX_SPLIT",
    "CastNameError",
    "Pattern",
    "Split",
    "allowed",
    "check_name",
    "check_pattern",
    "check_recipients",
    "check_split",
    "compiled",
    "estate_of",
    "inside",
    "matches",
    "split_hash",
    "split_takes",
]

MAX_NAME_BYTES = 256
MAX_SEGMENTS = 16
MIN_SEGMENTS = 2
MAX_SEGMENT = 64
MAX_RECIPIENTS = 64
MAX_SPLIT = 1024
SPLIT_KEYS = ("id", "publisher", "name")

SplitKey = Literal["id", "publisher", "name"]
Split = tuple[str, int, int]

_SEGMENT = re.compile(r"[A-Za-z0-9._@+-]{1,64}")
#: A whole well-formed name in one match: the fast path of check_name (the
#: per-segment checks run only to say what is wrong).
_NAME = re.compile(r"(?:[A-Za-z0-9._@+-]{1,64}/){1,15}[A-Za-z0-9._@+-]{1,64}")
_USER = re.compile(r"[A-Za-z0-9._+-]{1,64}")


class CastNameError(ValueError, Error):
    """A name, pattern, recipient or split that CAST refuses, and why.

    ``reason`` is the word a routed refusal carries: ``bad_name``, or
    ``foreign_prefix`` for a publish under another estate's name.
    """

    def __init__(self, message: str, reason: str = "bad_name") -> None:
        super().__init__(message)
        self.reason = reason


def _segments(text: object, what: str) -> list[str]:
    if not isinstance(text, str):
        raise CastNameError(f"a {what} is a string, got {type(text).__name__}")
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_NAME_BYTES:
        raise CastNameError(f"a {what} is at most {MAX_NAME_BYTES} bytes, got {size}")
    segments = text.split("/")
    if not MIN_SEGMENTS <= len(segments) <= MAX_SEGMENTS:
        raise CastNameError(
            f"a {what} has {MIN_SEGMENTS} to {MAX_SEGMENTS} segments (estate/...), got {len(segments)} in {text!r}"
        )
    return segments


def check_name(name: object) -> str:
    """``name`` if it is a well-formed message name, else CastNameError."""
    if type(name) is str and len(name) <= MAX_NAME_BYTES and _NAME.fullmatch(name):
        return name  # ASCII only, so characters are bytes
    for segment in _segments(name, "name"):
        if not _SEGMENT.fullmatch(segment):
            raise CastNameError(
                f"bad segment {segment!r} in name {name!r}: 1 to {MAX_SEGMENT} of A-Z a-z 0-9 . _ @ + -"
            )
    return name  # type: ignore[return-value]


def check_pattern(pattern: object) -> str:
    """``pattern`` if well-formed: segments, ``*`` for one segment, a last ``**`` for one or more."""
    segments = _segments(pattern, "pattern")
    for index, segment in enumerate(segments):
        if segment == "*" or (segment == "**" and index == len(segments) - 1):
            continue
        if segment == "**":
            raise CastNameError(f"'**' may only be the last segment of a pattern, in {pattern!r}")
        if not _SEGMENT.fullmatch(segment) or "*" in segment:
            raise CastNameError(
                f"bad segment {segment!r} in pattern {pattern!r}: '*', '**' or 1 to {MAX_SEGMENT} of A-Z a-z 0-9 . _ @ + -"
            )
    return pattern  # type: ignore[return-value]


def estate_of(name: str) -> str:
    """The first segment: the estate a name (or recipient ``user@estate``) belongs to."""
    return name.split("/", 1)[0].rsplit("@", 1)[-1]


def check_recipients(recipients: object) -> tuple[str, ...] | None:
    """Recipients as a tuple of ``estate`` or ``user@estate``, None for a public message."""
    if recipients is None:
        return None
    if isinstance(recipients, (str, bytes)) or not isinstance(recipients, Iterable):
        raise CastNameError(f"recipients are a list of 'estate' or 'user@estate', got {type(recipients).__name__}")
    found = tuple(recipients)
    if not found:
        raise CastNameError("recipients is empty: leave it out for a public message")
    if len(found) > MAX_RECIPIENTS:
        raise CastNameError(f"at most {MAX_RECIPIENTS} recipients, got {len(found)}")
    for recipient in found:
        if not isinstance(recipient, str):
            raise CastNameError(f"a recipient is a string, got {type(recipient).__name__}")
        user, at, estate = recipient.rpartition("@")
        if not _SEGMENT.fullmatch(estate) or "@" in estate or (at and not _USER.fullmatch(user)):
            raise CastNameError(f"bad recipient {recipient!r}: 'estate' or 'user@estate'")
    return found


class Pattern:
    """A checked pattern, compiled once, that tells whether names match it."""

    __slots__ = ("text", "segments", "_match")

    def __init__(self, text: str) -> None:
        self.text = check_pattern(text)
        self.segments = tuple(text.split("/"))
        parts = []
        for segment in self.segments:
            if segment == "*":
                parts.append("[^/]+")
            elif segment == "**":
                parts.append("[^/]+(?:/[^/]+)*")
            else:
                parts.append(re.escape(segment))
        self._match = re.compile("/".join(parts)).fullmatch

    def matches(self, name: str) -> bool:
        return self._match(name) is not None

    def __repr__(self) -> str:
        return f"Pattern({self.text!r})"


@lru_cache(maxsize=1024)
def compiled(pattern: str) -> Pattern:
    """The compiled form of ``pattern``, cached: subscriptions repeat a few patterns."""
    return Pattern(pattern)


def matches(name: str, pattern: str) -> bool:
    """Whether ``name`` matches ``pattern`` (both assumed checked)."""
    return compiled(pattern).matches(name)


def inside(pattern: str, allowed_pattern: str) -> bool:
    """Whether every name ``pattern`` can match also matches ``allowed_pattern``.

    Exact, segment by segment: a literal is inside itself or ``*``; ``*`` is
    inside ``*`` only (names have more segments than any literal); a
    trailing ``**`` of the allowed pattern takes any non-empty rest, while a
    ``**`` of the asked pattern makes it match unboundedly long names, which
    only an allowed ``**`` at or before its position covers.
    """
    asked = check_pattern(pattern).split("/")
    allow = check_pattern(allowed_pattern).split("/")
    if allow[-1] == "**":
        head = allow[:-1]
        if len(asked) <= len(head):
            return False
        asked_head = asked[: len(head)]
    else:
        head = allow
        if asked[-1] == "**" or len(asked) != len(head):
            return False
        asked_head = asked
    return all(a == "*" or (s == a and s not in ("*", "**")) for s, a in zip(asked_head, head, strict=True))


def allowed(pattern: str, allowed_patterns: Iterable[str]) -> bool:
    """Whether ``pattern`` is inside one of ``allowed_patterns``.

    Conservative: a pattern covered only by the union of several allowed
    patterns (``abc/**`` by ``abc/*`` and ``abc/*/**``) is refused; a layout
    that means it lists the wider pattern.
    """
    return any(inside(pattern, allow) for allow in allowed_patterns)


def check_split(split: object) -> Split | None:
    """``(key, M, k)`` checked: key one of id/publisher/name, 1 <= M <= 1024, 0 <= k < M."""
    if split is None:
        return None
    if not isinstance(split, (tuple, list)) or len(split) != 3:
        raise CastNameError(f"a split is [key, M, k], got {split!r}")
    key, m, k = split
    if key not in SPLIT_KEYS:
        raise CastNameError(f"a split's key is one of {', '.join(SPLIT_KEYS)}, got {key!r}")
    if type(m) is not int or not 1 <= m <= MAX_SPLIT:
        raise CastNameError(f"a split's M is an integer from 1 to {MAX_SPLIT}, got {m!r}")
    if type(k) is not int or not 0 <= k < m:
        raise CastNameError(f"a split's k is an integer from 0 to M-1 = {m - 1}, got {k!r}")
    return (key, m, k)


def split_hash(key: bytes) -> int:
    """``blake2b(key, digest_size=8)`` as a big-endian integer: the draft's hash."""
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")


def split_takes(split: Split | None, id: bytes, name: str, publisher: str) -> bool:
    """Whether the subscription with ``split`` takes this message (None takes all)."""
    if split is None:
        return True
    key, m, k = split
    if m == 1:
        return True
    if key == "id":
        value = id
    elif key == "publisher":
        value = publisher.encode("utf-8")
    else:
        value = name.encode("utf-8")
    return split_hash(value) % m == k
