"""A real Unix-datagram port: what a lane sends its datagrams through.

Three things make Unix datagrams different from UDP, and this module is
about them:

* **The socket is a file.**  It is created mode 0600 (the mode is set on the
  socket before ``bind``, so there is no moment when it is open to others)
  inside a runtime directory the caller names.  A leftover file from a dead
  process is removed; a socket some live process still holds is never bound
  over.  On close the file is removed -- only if it is still ours.
* **The receiver's queue is tiny.**  ``net.unix.max_dgram_qlen`` (10 here)
  datagrams may wait at a reader; a faster sender gets EAGAIN almost at
  once.  Worse, ``poll`` on an *unconnected* sender reports "writable" even
  while its peer's queue is full, so waiting on the port's own socket would
  spin.  On EAGAIN the port therefore connects a small *watch* socket to the
  congested peer: the kernel reports that one writable exactly when the
  peer's queue has room, which is what :meth:`on_writable` waits for.
* **Sizes are set by socket buffers, not headers.**  Measured here, the
  largest datagram is the sender's SO_SNDBUF less 32 bytes (212,960 B at
  the default 212,992), up to about 4.26 MB however large the buffer; an
  unprivileged process gets at most twice net.core.wmem_max as its buffer.
  :data:`UXD_DEFAULT_MAX` (64 KiB) fits any default with room for several
  datagrams in flight, so any two yards agree on it without negotiating; a
  lane whose yards all raise it (``max_datagram=``, at most half the send
  buffer) moves large messages faster -- raw loopback here: 4.5 GB/s at
  64 KiB, 7.9 GB/s at 256 KiB.  Larger datagrams arriving are counted
  (``oversized``) and dropped.

Addresses are socket-file paths as ``str``.  Datagrams from unnamed sockets
carry no address to answer to and are dropped (``counts["anonymous"]``).
"""

from __future__ import annotations

import errno
import os
import re
import socket
import stat
from collections import OrderedDict
from typing import Any

from flowcast.errors import Error
from flowcast.transport.port import Address
from flowcast.transport.ports._socket import DEFAULT_BUFFER, SocketPort

__all__ = ["UxdPort", "UXD_DEFAULT_MAX", "uxd_address", "SocketInUse"]

UXD_DEFAULT_MAX = 65536

# sun_path is 108 bytes including the terminating NUL.
_PATH_MAX = 107
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\Z")
_WATCHES = 16  # congested peers watched at once; the oldest is let go


class SocketInUse(FileExistsError, Error):
    """Another live socket is bound at that path."""


def uxd_address(directory: str | os.PathLike[str], name: str) -> str:
    """The socket path of yard ``name`` in ``directory``.

    ``name`` must be a plain file name (letters, digits, ``_ . -``, not
    starting with a dot, at most 64 characters): it is joined to a path, so
    nothing that could climb out of ``directory`` is allowed.
    """
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"bad yard socket name {name!r}: use letters, digits, '_', '.', '-' (not first), max 64")
    path = os.path.join(os.fspath(directory), name)
    if len(os.fsencode(path)) > _PATH_MAX:
        raise ValueError(f"socket path {path!r} is longer than the {_PATH_MAX} bytes a Unix socket address holds")
    return path


class UxdPort(SocketPort):
    """One bound Unix-datagram socket file, ``directory/name``.

    ``directory`` is created (mode 0700) if missing.  Raises
    :class:`SocketInUse` if a live socket already holds the path and
    :class:`FileExistsError` if something that is not a socket does.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        name: str,
        *,
        scheduler: Any | None = None,
        max_datagram: int = UXD_DEFAULT_MAX,
        buffer_size: int = DEFAULT_BUFFER,
    ) -> None:
        path = uxd_address(directory, name)
        if max_datagram < 1:
            raise ValueError("max_datagram must be positive")
        os.makedirs(os.fspath(directory), mode=0o700, exist_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            # The file bind() creates takes the socket inode's mode (less the
            # umask): set it first, so the path is never open to others.
            os.fchmod(sock.fileno(), 0o600)
            _clear_stale(path)
            sock.bind(path)
            self._inode = os.stat(path).st_ino
        except BaseException:
            sock.close()
            raise
        super().__init__(sock, max_datagram, scheduler, buffer_size)
        if max_datagram > self.send_buffer // 2:
            self._sock.close()
            _unlink_if(path, self._inode)
            raise ValueError(f"max_datagram {max_datagram} does not fit the send buffer ({self.send_buffer} B)")
        self._address = path
        self._path = path
        self._watches: OrderedDict[str, socket.socket] = OrderedDict()
        self._congested: str | None = None

    @property
    def path(self) -> str:
        return self._path

    def _accept(self, item: tuple[bytes, Any]) -> bool:
        if item[1] is None or item[1] == "":
            self._events["anonymous"] += 1
            return False
        return True

    def _blocked(self, address: Address) -> None:
        if isinstance(address, (str, bytes)):
            self._congested = address if isinstance(address, str) else os.fsdecode(address)

    def _write_watch(self) -> socket.socket:
        # The last congested peer stays the one watched until another
        # congests: asking twice must not fall back to the own socket, whose
        # "writable" would be a lie (see the module docstring).
        path = self._congested
        if path is None:
            return self._sock  # own send buffer: its writability is honest
        watch = self._watches.pop(path, None)
        if watch is None:
            watch = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            watch.setblocking(False)
            if len(self._watches) >= _WATCHES:
                self._watches.popitem(last=False)[1].close()
        self._watches[path] = watch
        try:
            # (Re)connect every time: the peer may have restarted since.
            watch.connect(path)
        except OSError:
            # Gone: report "writable" so the caller's send learns that.
            pass
        return watch

    def _close_extra(self) -> None:
        for watch in self._watches.values():
            watch.close()
        self._watches.clear()
        _unlink_if(self._path, self._inode)


def _clear_stale(path: str) -> None:
    """Remove a socket file nobody listens on; refuse a live one."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise FileExistsError(errno.EEXIST, "not a socket; refusing to replace it", path)
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        probe.connect(path)
    except ConnectionRefusedError:
        os.unlink(path)  # stale: its owner died without removing it
        return
    except OSError as error:
        if error.errno == errno.EPROTOTYPE:  # a live stream socket
            raise SocketInUse(errno.EADDRINUSE, "a live stream socket is bound there", path) from None
        raise
    finally:
        probe.close()
    raise SocketInUse(errno.EADDRINUSE, "a live socket is bound there", path)


def _unlink_if(path: str, inode: int) -> None:
    """Remove ``path`` only if it is still the file we bound."""
    try:
        if os.lstat(path).st_ino == inode:
            os.unlink(path)
    except OSError:
        pass
