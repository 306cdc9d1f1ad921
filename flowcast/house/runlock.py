"""One supervisor per run folder: a lock that names its holder and goes with it."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from flowcast.errors import Error

__all__ = ["AlreadyRunning", "take_run_lock"]


class AlreadyRunning(Error):
    """Another live supervisor holds the run folder's lock; ``pid`` is its pid as it wrote it (None if unreadable)."""

    def __init__(self, path: Path, pid: int | None) -> None:
        self.path = path
        self.pid = pid
        who = f"supervisor pid {pid}" if pid is not None else "another supervisor (pid not yet written)"
        super().__init__(f"already running under {who} (lock {path})")


def take_run_lock(path: Path) -> int:
    """Lock ``path`` for this process, write our pid into it, return its descriptor (keep it open).

    One supervisor per run folder: a second one would start a second set of
    houses that fight the first over the road ports and the lane sockets,
    and overwrite its status file.  ``flock`` rather than a pid file alone:
    the kernel drops the lock when the holder dies, even by ``kill -9``, so
    there is no stale lock to clean up and no pid reuse to guess about; the
    pid written in the file is only there to name the holder.  The
    descriptor is close-on-exec, so the houses do not inherit the lock (a
    house outliving a killed supervisor for a moment must not block the
    next one).  Raises :class:`AlreadyRunning` when another process holds it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            text = os.read(fd, 64).decode("ascii", "replace").strip()
        except OSError:
            text = ""
        os.close(fd)
        raise AlreadyRunning(path, int(text) if text.isdigit() else None) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd
