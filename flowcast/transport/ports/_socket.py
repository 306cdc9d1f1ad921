"""What UDP and Unix-datagram ports share: one non-blocking socket.

The hot path is one ``sendto`` or ``recvfrom`` per datagram and nothing else:
no ``settimeout`` (CPython would ``poll()`` before every call), no per-call
allocation beyond the ``bytes`` the caller receives.  Measured here,
``recvfrom(n)`` is as fast as ``recvfrom_into`` on a preallocated buffer
followed by the copy the caller needs anyway, so the ports use it.

Errors are sorted into three kinds, because a stack must treat them
differently:

* *try again later* (EAGAIN, ENOBUFS): ``send`` returns False and the caller
  keeps the datagram;
* *the destination is not there* (refused, unreachable, no such socket
  file): the datagram is as lost as one dropped by a router -- counted, and
  ``send`` returns True so a dead peer never wedges a send queue; the
  stack's own retries and presence handle the rest;
* anything else (a closed port, an address of the wrong kind, a datagram
  larger than the port carries) is a bug in the caller and raises.
"""

from __future__ import annotations

import errno
import select
import socket
from collections import Counter
from collections.abc import Callable
from typing import Any

from flowcast.transport.port import Address

__all__ = ["SocketPort", "DEFAULT_BUFFER"]

#: Socket buffer size asked for; the kernel may grant less.
DEFAULT_BUFFER = 8 * 1024 * 1024

# Linux option numbers the socket module does not export: they let a
# privileged process exceed net.core.[rw]mem_max.
_SO_SNDBUFFORCE = 32
_SO_RCVBUFFORCE = 33

_AGAIN = frozenset({errno.EAGAIN, errno.EWOULDBLOCK, errno.ENOBUFS, errno.EINTR})
_UNREACHABLE = frozenset(
    {
        errno.ECONNREFUSED,
        errno.ECONNRESET,
        errno.ENOENT,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
        errno.EHOSTDOWN,
        errno.ENETDOWN,
        errno.EPERM,
        errno.EACCES,
        errno.EPROTOTYPE,
        errno.ENOTDIR,
    }
)

# How on_writable waits, best first: the scheduler's own add_writer if it
# has one; a private epoll registered as a reader; polling on a timer this
# often (doubling up to the cap) where there is no epoll -- a fallback.
_BY_WRITER = "writer"
_BY_EPOLL = "epoll"
_BY_POLLING = "polling"
_HAVE_EPOLL = hasattr(select, "epoll")
_POLL_FIRST = 0.0002
_POLL_CAP = 0.01


def size_buffers(sock: socket.socket, size: int) -> tuple[int, int]:
    """Ask for ``size``-byte send and receive buffers; return what was granted.

    The forcing options work only for a privileged process; otherwise the
    plain options give whatever net.core.*mem_max allows.  Never raises:
    a small buffer costs throughput, not correctness.
    """
    for force, plain in ((_SO_SNDBUFFORCE, socket.SO_SNDBUF), (_SO_RCVBUFFORCE, socket.SO_RCVBUF)):
        try:
            sock.setsockopt(socket.SOL_SOCKET, force, size)
        except OSError:
            try:
                sock.setsockopt(socket.SOL_SOCKET, plain, size)
            except OSError:
                pass
    return (
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
    )


class SocketPort:
    """A bound, non-blocking datagram socket behind the port interface.

    Subclasses bind the socket, pass the largest datagram it carries and
    set ``_address``; they may override
    :meth:`_accept` to refuse datagrams (counted) and :meth:`_write_watch`
    to name the file whose writability means "try again".
    """

    #: Finding the socket empty costs a ``recvfrom`` that fails (a system
    #: call and an exception): stacks read sparse traffic one datagram at a
    #: time instead of draining to that failure.
    empty_read_costs = True

    def __init__(self, sock: socket.socket, max_datagram: int, scheduler: Any | None, buffer_size: int) -> None:
        sock.setblocking(False)
        self._sock = sock
        self._max = max_datagram
        self._bufsize = max_datagram + 1  # one more byte reveals truncation
        self._scheduler = scheduler
        self._readable: Callable[[], None] | None = None
        self._writable: Callable[[], None] | None = None
        self._write_file: Any = None  # what is registered for writability
        self._write_mode: str | None = None
        self._epoll: Any = None
        self._poll_timer: Any = None
        self._poll_delay = _POLL_FIRST
        self._closed = False
        self.send_buffer, self.receive_buffer = size_buffers(sock, buffer_size)
        self._sent = 0  # plain ints on the hot path; see counts
        self._received = 0
        self._events: Counter[str] = Counter()
        # Subclasses that refuse nothing leave _accept alone: no call per datagram.
        self._filters = type(self)._accept is not SocketPort._accept

    # -- the port interface ------------------------------------------------

    @property
    def address(self) -> Address:
        return self._address

    @property
    def max_datagram(self) -> int:
        return self._max

    @property
    def counts(self) -> Counter[str]:
        """Event counts: ``sent``, ``received``, ``again`` (send said try
        later), ``unreachable``, ``oversized``, ``receive_errors``, and for
        Unix datagrams ``anonymous``.  A snapshot."""
        counts = Counter(self._events)
        if self._sent:
            counts["sent"] = self._sent
        if self._received:
            counts["received"] = self._received
        return counts

    def fileno(self) -> int:
        """The socket's descriptor, to select on for readability."""
        return self._sock.fileno()

    def send(self, data: bytes, address: Address) -> bool:
        if len(data) > self._max:
            raise ValueError(f"datagram of {len(data)} bytes is larger than this port carries ({self._max})")
        try:
            self._sock.sendto(data, address)
        except OSError as error:
            return self._send_failed(error, data, address)
        self._sent += 1
        return True

    def send_segments(self, data: bytes, segment: int, address: Address) -> int:
        """Send ``data`` as consecutive datagrams of ``segment`` bytes (the
        last may be shorter); return how many were handed over.

        They go in order and the count is always a prefix: the caller keeps
        the rest and retries them when ``on_writable`` fires, as after a
        False ``send``.  Ports that can (UDP with GSO) do it in far fewer
        system calls; here it is one ``send`` each.
        """
        if not 0 < segment <= self._max:
            raise ValueError(f"segment size must be 1..{self._max}, got {segment}")
        view = memoryview(data)
        sent = 0
        for offset in range(0, len(view), segment):
            if not self.send(view[offset : offset + segment], address):
                break
            sent += 1
        return sent

    def receive(self) -> tuple[bytes, Address] | None:
        got = self.receive_many(1)
        return got[0] if got else None

    def receive_many(self, limit: int) -> list[tuple[bytes, Address]]:
        recvfrom = self._sock.recvfrom
        size = self._bufsize
        top = self._max
        if limit == 1:  # a sparse read (Stack.service): one datagram, no list building
            try:
                item = recvfrom(size)
            except BlockingIOError:
                return []
            except InterruptedError:
                item = None
            except OSError as error:
                if self._closed or error.errno == errno.EBADF:
                    raise
                self._events["receive_errors"] += 1  # as below: it belongs to no datagram
                item = None
            if item is not None:
                if len(item[0]) <= top and (not self._filters or self._accept(item)):
                    self._received += 1
                    return [item]
                if len(item[0]) > top:
                    self._events["oversized"] += 1
            # refused, or an error: look further as the general path does
        out: list[tuple[bytes, Address]] = []
        dropped = 0
        while len(out) < limit:
            try:
                item = recvfrom(size)
            except BlockingIOError:
                break
            except InterruptedError:
                continue
            except OSError as error:
                if self._closed or error.errno == errno.EBADF:
                    raise
                # A pending ICMP error or the like: it belongs to no datagram.
                self._events["receive_errors"] += 1
                dropped += 1
                if dropped > limit:
                    break
                continue
            if len(item[0]) > top:
                self._events["oversized"] += 1
            elif self._accept(item):
                out.append(item)
                continue
            dropped += 1
            if dropped > limit:  # bounded: a flood of junk cannot pin us here
                break
        self._received += len(out)
        return out

    def on_readable(self, callback: Callable[[], None] | None) -> None:
        scheduler = self._need_scheduler(callback)
        if scheduler is None:
            return
        if self._readable is not None:
            scheduler.remove_reader(self._sock)
        self._readable = callback
        if callback is not None and not self._closed:
            scheduler.add_reader(self._sock, callback)

    def on_writable(self, callback: Callable[[], None] | None) -> None:
        scheduler = self._need_scheduler(callback)
        self._disarm_writable()
        if scheduler is None or callback is None or self._closed:
            return
        self._writable = callback
        watch = self._write_watch()
        self._write_file = watch
        add_writer = getattr(scheduler, "add_writer", None)
        if add_writer is not None:
            self._write_mode = _BY_WRITER
            add_writer(watch, self._fire_writable)
        elif _HAVE_EPOLL:
            # The scheduler only watches for reading -- but an epoll
            # instance is itself readable exactly when one of its watched
            # files is ready, so a private one turns "writable" into
            # "readable" without any polling.
            if self._epoll is None:
                self._epoll = select.epoll()
            self._epoll.register(watch.fileno(), select.EPOLLOUT)
            self._write_mode = _BY_EPOLL
            scheduler.add_reader(self._epoll, self._fire_writable)
        else:
            self._write_mode = _BY_POLLING
            self._poll_delay = _POLL_FIRST
            self._poll_timer = scheduler.call_at(scheduler.clock.now(), self._poll_writable)

    def writable_fileno(self) -> int:
        """Descriptor to select on for writing after ``send`` returned False.

        For plain-Python callers without a scheduler: once it selects
        writable, sending may succeed again.
        """
        return self._write_watch().fileno()

    def close(self) -> None:
        if self._closed:
            return
        self._disarm_writable()
        if self._readable is not None and self._scheduler is not None:
            self._scheduler.remove_reader(self._sock)
        self._readable = None
        self._closed = True
        if self._epoll is not None:
            self._epoll.close()
        self._close_extra()
        self._sock.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "SocketPort":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<{type(self).__name__} {self._address!r}{state}>"

    # -- for subclasses ----------------------------------------------------

    _address: Address

    def _accept(self, item: tuple[bytes, Any]) -> bool:
        return True

    def _write_watch(self) -> Any:
        """The file whose writability means a failed send may now succeed."""
        return self._sock

    def _blocked(self, address: Address) -> None:
        """A send to ``address`` was told to try again."""

    def _close_extra(self) -> None:
        pass

    # -- internals ---------------------------------------------------------

    def _send_failed(self, error: OSError, data: bytes, address: Address) -> bool:
        code = error.errno
        if code in _AGAIN:
            self._events["again"] += 1
            self._blocked(address)
            return False
        if self._closed:
            raise error
        if code == errno.EMSGSIZE:
            raise ValueError(f"datagram of {len(data)} bytes is larger than the OS lets this port send") from error
        if code in _UNREACHABLE:
            self._events["unreachable"] += 1
            return True
        raise error

    def _need_scheduler(self, callback: object) -> Any:
        if self._scheduler is None and callback is not None:
            raise RuntimeError(
                f"{type(self).__name__} was made without a scheduler: select on fileno() "
                "(and writable_fileno()) instead of registering callbacks"
            )
        return self._scheduler

    def _fire_writable(self) -> None:
        callback = self._writable
        self._disarm_writable()
        if callback is not None:
            callback()

    def _disarm_writable(self) -> None:
        self._writable = None
        mode, self._write_mode = self._write_mode, None
        watch, self._write_file = self._write_file, None
        if mode is _BY_POLLING:
            if self._poll_timer is not None:
                self._poll_timer.cancel()
                self._poll_timer = None
        elif mode is _BY_WRITER:
            self._scheduler.remove_writer(watch)
        elif mode is _BY_EPOLL:
            self._scheduler.remove_reader(self._epoll)
            try:
                self._epoll.unregister(watch.fileno())
            except (OSError, ValueError, KeyError):
                pass  # the watch was closed meanwhile: nothing left to remove

    def _poll_writable(self) -> None:
        """Fallback for schedulers without ``add_writer``: look, back off."""
        self._poll_timer = None
        watch = self._write_file
        if watch is None or self._closed:
            return
        try:
            ready = select.select((), (watch,), (), 0)[1]
        except (OSError, ValueError):
            ready = [watch]  # let the caller's send find out what is wrong
        if ready:
            self._fire_writable()
            return
        scheduler = self._scheduler
        self._poll_timer = scheduler.call_at(scheduler.clock.now() + self._poll_delay, self._poll_writable)
        self._poll_delay = min(self._poll_delay * 2, _POLL_CAP)
