"""A user's long-term keys: who ``alice@abc`` is to the people she writes to.

End to end means the estates carry what they cannot read, so the keys
live with the user's house, never in the cache or on the wire in secret
form.  Two keys, both random (not one derived from the other, so a
weakness found in either conversion cannot link them): Ed25519 signs
contact requests and acceptances, X25519 opens and seals message boxes.

Layout (directory 0700, files 0600, written atomically, as the estate's
keep is)::

    <estate dir>/cast/users/<user>.key    64 bytes: signing seed, box secret

A user's name is checked before it becomes a path: one CAST name segment
without ``@`` (``user@estate`` is how others address it).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from nacl.public import PrivateKey, PublicKey
from nacl.signing import SigningKey, VerifyKey

from flowcast.errors import Error
from flowcast.runtime.durable import atomic_write

__all__ = ["IdentityError", "UserKeys", "check_user", "check_address"]

_USER = re.compile(r"[A-Za-z0-9._+-]{1,64}\Z")
_ESTATE = re.compile(r"[A-Za-z0-9._+-]{1,64}\Z")
_SIZE = 64


class IdentityError(ValueError, Error):
    """A user name that cannot be one, or a key file that cannot be read (the path is named)."""


def check_user(user: object) -> str:
    """A user name: one segment, no ``@``, never ``.`` or ``..`` (it becomes a file name)."""
    if not isinstance(user, str) or not _USER.match(user) or user in (".", ".."):
        raise IdentityError(f"user {str(user)[:40]!r} is not 1 to 64 of [A-Za-z0-9._+-]")
    return user


def check_address(address: object) -> tuple[str, str]:
    """``user@estate`` split in two, or IdentityError."""
    if not isinstance(address, str) or address.count("@") != 1:
        raise IdentityError(f"{str(address)[:60]!r} is not user@estate")
    user, estate = address.split("@")
    if not _ESTATE.match(estate) or estate in (".", ".."):
        raise IdentityError(f"{address[:60]!r}: estate {estate[:40]!r} is not a name")
    return check_user(user), estate


class UserKeys:
    """The signing and box keys of ``user@estate``; ``load_or_create`` keeps them under the estate dir."""

    __slots__ = ("user", "estate", "signing", "box")

    def __init__(self, user: str, estate: str, signing: SigningKey, box: PrivateKey) -> None:
        self.user = check_user(user)
        self.estate = estate
        self.signing = signing
        self.box = box

    @property
    def address(self) -> str:
        return f"{self.user}@{self.estate}"

    @property
    def verify_key(self) -> VerifyKey:
        return self.signing.verify_key

    @property
    def public_key(self) -> PublicKey:
        return self.box.public_key

    @classmethod
    def generate(cls, user: str, estate: str) -> "UserKeys":
        return cls(user, estate, SigningKey.generate(), PrivateKey.generate())

    @staticmethod
    def path(home: str | os.PathLike[str], user: str) -> Path:
        return Path(home) / "cast" / "users" / f"{check_user(user)}.key"

    @classmethod
    def load_or_create(cls, home: str | os.PathLike[str], user: str, estate: str) -> "UserKeys":
        """The user's keys from ``home`` (the estate dir); new ones, written 0600, if there are none.

        A file that is there but not 64 bytes is refused, never replaced:
        new keys would silently cut the user off from every contact.
        """
        path = cls.path(home, user)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            keys = cls.generate(user, estate)
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(path.parent, 0o700)
            atomic_write(path, bytes(keys.signing) + bytes(keys.box), 0o600)
            return keys
        if len(raw) != _SIZE:
            raise IdentityError(f"{path}: a user key file is {_SIZE} bytes, this one {len(raw)}; move it away only if the user may lose their contacts")
        return cls(user, estate, SigningKey(raw[:32]), PrivateKey(raw[32:]))

    def __repr__(self) -> str:
        return f"<UserKeys {self.address}>"
