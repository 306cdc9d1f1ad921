"""A child's stdin as one end of a socket pair, filled only once the child asks.

Why not a pipe filled before the start: the hand-off holds the house's
lane keys, and between ``exec`` and the house's ``prctl(PR_SET_DUMPABLE, 0)``
(an interpreter start and its imports) any process of the same user could
open ``/proc/PID/fd/0`` -- a pipe opens there -- and read it.  A socket does
not open through ``/proc/PID/fd`` (ENXIO), and the supervisor writes
nothing into it until the child has made itself non-dumpable and said so
with one byte (:func:`signal_ready`); from then on its ``/proc`` files are
closed to the user's other processes.

The supervisor side (:class:`Offer`) waits and writes on a thread of its
own, so a child that never asks, or reads slowly, holds up no other child;
the child reads to EOF, as from a pipe.  ``PIPE_MAX`` bounds what a child is
handed (an estate's hand-off is a few KiB).
"""

from __future__ import annotations

import logging
import os
import socket
import threading

__all__ = ["PIPE_MAX", "READY", "READY_TIMEOUT", "Offer", "signal_ready"]

log = logging.getLogger("flowcast.supervisor")

PIPE_MAX = 1 << 20
#: The byte a child sends on its stdin once it is non-dumpable: "hand it over now".
READY = b"R"
#: How long a child may take to ask (interpreter start) and to read; then it gets EOF.
READY_TIMEOUT = 60.0


def signal_ready(fd: int = 0) -> bool:
    """Tell the supervisor on ``fd`` that this process may be handed its stdin now.

    Call only after ``not_dumpable()``.  False when ``fd`` cannot be written
    (``/dev/null``, a pipe from a test or a hand start): its bytes are there
    already, or there are none.
    """
    try:
        return os.write(fd, READY) == 1
    except OSError:
        return False


class Offer:
    """``data`` for one start of a child: the child's end to pass as its stdin, our end to write it."""

    def __init__(self, data: bytes, *, timeout: float = READY_TIMEOUT) -> None:
        self.data = data
        self.timeout = timeout
        self._ours, self._theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)

    def child_fd(self) -> int:
        """The descriptor to give the child as its stdin (Popen dups it onto fd 0)."""
        return self._theirs.fileno()

    def started(self, name: str) -> None:
        """The child runs with its own copy of its end: wait for its ask, then hand ``data`` over."""
        self._theirs.close()
        threading.Thread(target=self._serve, args=(name,), name=f"handoff-{name}", daemon=True).start()

    def abandon(self) -> None:
        """The child did not start: nothing is handed."""
        self._theirs.close()
        self._ours.close()

    def _serve(self, name: str) -> None:
        sock = self._ours
        try:
            sock.settimeout(self.timeout)
            asked = sock.recv(1)
            if asked != READY:
                # gone before asking (EOF), or not a house: it gets EOF, nothing else
                log.warning("%s did not ask for its hand-off (%r): none given", name, asked)
                return
            sock.sendall(self.data)
            sock.shutdown(socket.SHUT_WR)
        except OSError as error:  # timeout, or the child died mid-read: it restarts and asks anew
            log.warning("%s hand-off not delivered: %s", name, error)
        finally:
            sock.close()
