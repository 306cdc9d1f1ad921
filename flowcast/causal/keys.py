"""An estate's causal signing keys on disk: ``NAME.key`` (secret, 0600) and ``NAME.pub`` (verify key, hex).

Why files of their own rather than the estate's road keep: a topic's
publishers are people or roles (alice, the log's owner), not estates, and
one estate may publish as several; and the ``.pub`` files are what other
estates' layouts name as a topic's owner and publishers, so they are made
to be copied around while the ``.key`` never leaves its folder.

A secret key readable by anyone but its owner is refused, as ssh refuses
one: a signature is only proof of its publisher if nobody else could make
it.  A key is created by linking a complete temporary file into place, so
two ``keygen`` runs at once cannot leave a half-written key or overwrite
one that a ``.pub`` already handed out names.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from pathlib import Path

from nacl.signing import SigningKey

from flowcast.causal.config import check_key
from flowcast.causal.message import CausalError
from flowcast.runtime.durable import fsync_dir

__all__ = ["KEY_NAME", "KeyFileError", "check_key_name", "create_signer", "load_signer", "read_verify_key"]

#: A key's name: the file stem of ``NAME.key`` and ``NAME.pub``.
KEY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")
_MAX_FILE = 4096  # a key file is a line of hex; anything larger is not one


class KeyFileError(CausalError):
    """A key file that is missing, malformed or not private enough; the message says which file and why."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "bad_key")


def check_key_name(name: object) -> str:
    if not isinstance(name, str) or not KEY_NAME.match(name):
        raise KeyFileError(f"a key name is 1 to 64 letters, digits, '_' or '-' starting with a letter or digit, got {str(name)[:80]!r}")
    return name


def _read_hex_line(path: Path, what: str) -> bytes:
    try:
        with path.open("rb") as handle:
            data = handle.read(_MAX_FILE + 1)
    except FileNotFoundError:
        raise KeyFileError(f"no {what} file {path}") from None
    except OSError as error:
        raise KeyFileError(f"cannot read {what} file {path}: {error.strerror or error}") from None
    try:
        raw = bytes.fromhex(data.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        raw = b""
    if len(raw) != 32:
        raise KeyFileError(f"{what} file {path} does not hold 64 hex digits")
    return raw


def read_verify_key(path: Path) -> bytes:
    """The 32-byte verify key in a ``.pub`` file (64 hex digits and a newline)."""
    return check_key(_read_hex_line(Path(path), "verify key"))


def load_signer(directory: Path, name: str) -> SigningKey:
    """``DIR/NAME.key``, refused unless it is a regular file only its owner may read or write."""
    path = Path(directory) / f"{check_key_name(name)}.key"
    try:
        info = path.stat()
    except FileNotFoundError:
        raise KeyFileError(f"no signing key file {path}; make one with 'flowcast causal keygen {name} --dir {directory}'") from None
    except OSError as error:
        raise KeyFileError(f"cannot read signing key file {path}: {error.strerror or error}") from None
    if not stat.S_ISREG(info.st_mode):
        raise KeyFileError(f"signing key file {path} is not a regular file")
    if info.st_mode & 0o077:
        raise KeyFileError(f"signing key file {path} has mode {stat.S_IMODE(info.st_mode):04o}; it must be 0600 (chmod 600 {path})")
    return SigningKey(_read_hex_line(path, "signing key"))


def _link_new(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to a temporary file, sync it, and link it in as ``path``; FileExistsError if there is one."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def create_signer(directory: Path, name: str) -> tuple[SigningKey, bool]:
    """``(key, created)``: the key ``NAME`` in ``directory``, made (with its ``.pub``) if it does not exist.

    An existing key is loaded, never replaced: its ``.pub`` may already be
    a publisher in other estates' layouts.  A missing ``.pub`` next to an
    existing key is written again from it.
    """
    directory = Path(directory)
    check_key_name(name)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    key_path = directory / f"{name}.key"
    created = False
    try:
        key = SigningKey.generate()
        _link_new(key_path, bytes(key).hex().encode() + b"\n", 0o600)
        created = True
    except FileExistsError:
        key = load_signer(directory, name)
    pub_path = directory / f"{name}.pub"
    public = bytes(key.verify_key)
    if pub_path.exists():
        if read_verify_key(pub_path) != public:
            raise KeyFileError(f"verify key file {pub_path} does not match {key_path}; move one of them away")
    else:
        try:
            _link_new(pub_path, public.hex().encode() + b"\n", 0o644)
        except FileExistsError:
            if read_verify_key(pub_path) != public:
                raise KeyFileError(f"verify key file {pub_path} does not match {key_path}; move one of them away") from None
    fsync_dir(directory)
    return key, created
