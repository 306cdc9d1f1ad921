"""Files that appear whole or not at all, and stay after a crash.

Keeps, converted flows and export segments all need the same three steps:
write under a temporary name, fsync the file, rename it into place, then
fsync the directory so the rename itself survives a power cut.  One
implementation here instead of three slightly different ones.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["atomic_write", "replace_durably", "fsync_dir"]


def fsync_dir(directory: Path) -> None:
    """Make the names in ``directory`` (renames, unlinks) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_durably(tmp: Path, final: Path) -> None:
    """Move a completely written ``tmp`` to ``final``; both data and name durable."""
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, final)
    fsync_dir(final.parent if str(final.parent) else Path("."))


def atomic_write(path: Path, data: bytes, mode: int | None = None, *, sync: bool = True, sync_dir: bool = True) -> None:
    """Write ``data`` to ``path`` so readers see the old file or the new one, never part.

    ``mode`` None gives an ordinary file (0666 less the umask), not the 0600
    a temporary file starts with; keeps pass 0o600.  ``sync`` False skips
    every fsync (a file nobody is told is durable); ``sync_dir`` False leaves
    the directory's fsync to a caller that renames many files into it and
    syncs it once (the keep writer's batches).
    """
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    try:
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            if sync:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
        if sync and sync_dir:
            fsync_dir(directory)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
