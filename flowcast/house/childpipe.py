"""A child's stdin as a pipe filled before the child starts.

The supervisor writes a child's stdin bytes whole into the pipe and closes
its end before the fork, so it never blocks on a child that does not read,
and the child reads to EOF.  That bounds what fits to what one pipe holds:
Linux lets an unprivileged process grow a pipe to ``/proc/sys/fs/pipe-max-size``
(1 MiB by default); an estate's hand-off is a few KiB.
"""

from __future__ import annotations

import os

__all__ = ["PIPE_MAX", "filled_pipe"]

PIPE_MAX = 1 << 20
_F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ, named in the fcntl module only from Python 3.10 on Linux
_PIPE_DEFAULT = 65536


def filled_pipe(data: bytes) -> int:
    """The read end of a pipe that already holds ``data`` and is closed for writing.

    OSError (BlockingIOError) if ``data`` does not fit: reported, never a hang.
    """
    r, w = os.pipe()
    try:
        if len(data) > _PIPE_DEFAULT:
            import fcntl

            fcntl.fcntl(w, _F_SETPIPE_SZ, len(data))
        os.set_blocking(w, False)
        view = memoryview(data)
        while view:
            view = view[os.write(w, view) :]
    except BaseException:
        os.close(r)
        raise
    finally:
        os.close(w)
    return r
