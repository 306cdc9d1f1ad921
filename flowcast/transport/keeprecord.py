"""The keep's records: what it knows of a remote estate, and what a join gets.

Kept apart from :mod:`flowcast.transport.keep` (which decides and stores)
because the road, the key command and the keep's disk looks all read these
shapes without needing the keep's policy.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

from flowcast.errors import Error
from flowcast.transport.crypto import LongTermKeys, fingerprint

__all__ = ["Acceptance", "KeepError", "LocalIdentity", "RemoteRecord", "Status", "Verdict", "validate_name"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}\Z")


class KeepError(ValueError, Error):
    """A refused name, role, key or keep operation; the message is the reason."""


class Acceptance(str, enum.Enum):
    NEVER = "never"
    ONCE = "once"
    ALWAYS = "always"


class Status(str, enum.Enum):
    ACCEPTED = "accepted"
    PENDING = "pending"
    REJECTED = "rejected"


def validate_name(value: object, what: str = "name") -> str:
    """Return ``value`` if it is a safe estate/yard name or role, else raise KeepError.

    1-64 characters of letters, digits, ``_ . -``, starting with a letter or
    digit, and no ``..``: nothing a shell, a path or a log line could misread.
    """
    if not isinstance(value, str):
        raise KeepError(f"{what} must be a string, not {type(value).__name__}")
    if len(value) > 64:
        raise KeepError(f"{what} is {len(value)} characters long (at most 64)")
    if not _NAME.match(value) or ".." in value:
        # The value is not echoed: a reason goes back on the wire and into logs.
        raise KeepError(f"{what} must be letters, digits, '_', '.', '-' starting with a letter or digit (no '..', spaces, separators or control characters)")
    return value


@dataclass
class RemoteRecord:
    name: str
    role: str
    mode: int
    verkey: bytes
    pubkey: bytes
    status: Status
    uid: int = 0
    note: str = ""
    stamp: float = 0.0  # the newest JOIN stamp seen for this key
    origin: str = "operator"  # "wire": admitted from a JOIN by policy
    allowed: float = 0.0  # wall time of its last session (0: never had one)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.verkey, self.pubkey)

    def to_json(self) -> dict:
        # Field by field: dataclasses.asdict deep-copies, and this runs per admitted join.
        return {
            "name": self.name,
            "role": self.role,
            "mode": self.mode,
            "verkey": self.verkey.hex(),
            "pubkey": self.pubkey.hex(),
            "status": self.status.value,
            "uid": self.uid,
            "note": self.note,
            "stamp": self.stamp,
            "origin": self.origin,
            "allowed": self.allowed,
        }

    @property
    def stray(self) -> bool:
        """Pending and made by a join from the wire: an operator's to-do, worth no fsync."""
        return self.origin == "wire" and self.status is Status.PENDING

    @classmethod
    def from_json(cls, data: dict) -> "RemoteRecord":
        return cls(
            name=validate_name(data["name"]),
            role=validate_name(data["role"], "role"),
            mode=int(data.get("mode", 0)),
            verkey=bytes.fromhex(data["verkey"]),
            pubkey=bytes.fromhex(data["pubkey"]),
            status=Status(data["status"]),
            uid=int(data.get("uid", 0)),
            note=str(data.get("note", "")),
            stamp=float(data.get("stamp", 0.0)),
            origin=str(data.get("origin", "operator")),
            allowed=float(data.get("allowed", 0.0)),
        )


@dataclass
class Verdict:
    """What a join gets: a status, the record (if any) and a reason for people."""

    status: Status
    record: RemoteRecord | None
    reason: str = ""
    events: list[str] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)  # fingerprints forgotten: strays to make room, a rotated-away key
    successor: "RemoteRecord | None" = None  # a rotation found on disk: the record now bound to the name


@dataclass
class LocalIdentity:
    name: str
    role: str
    mode: int
    keys: LongTermKeys
