"""A real UDP port: what a road sends its datagrams through.

Addresses are what the socket module uses: ``(host, port)`` for IPv4 and
``(host, port, flowinfo, scope_id)`` for IPv6, hosts as numeric literals --
a host *name* would make ``sendto`` resolve it, blocking, on every call.

Python has no ``sendmmsg``/``recvmmsg``, so a system call per datagram is
the floor -- unless the kernel splits and joins datagrams itself.  Linux
can: with **GSO** one ``sendmsg`` carries up to 64 equal-sized datagrams
(:meth:`UdpPort.send_segments`), and with **GRO** (``gro=True``) one
``recvmsg`` returns a run of them joined, which :meth:`receive_many` splits
again.  Measured here on loopback, 1,200-byte datagrams: ~100,000/s one
call each, ~370,000/s with GSO, ~1,400,000/s with GSO and GRO.  GRO costs a
little on datagrams that arrive singly (``recvmsg`` and its ancillary data
are slower than ``recvfrom``), so it is asked for, not assumed.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import struct
from collections import deque
from typing import Any

from flowcast.transport.port import Address
from flowcast.transport.ports._socket import DEFAULT_BUFFER, SocketPort

__all__ = ["UdpPort", "UDP_MAX_IPV4", "UDP_MAX_IPV6"]

#: 65535 less the IPv4 (20) and UDP (8) headers.
UDP_MAX_IPV4 = 65507
#: 65535 less the UDP header; the IPv6 header is outside its payload length.
UDP_MAX_IPV6 = 65527

# Linux: <netinet/udp.h>, not exported by the socket module.
_SOL_UDP = 17
_UDP_SEGMENT = 103
_UDP_GRO = 104
_GSO_MAX_SEGMENTS = 64  # UDP_MAX_SEGMENTS in the kernel
_GRO_BUFFER = 65536  # the kernel joins at most 64 KiB into one read
_GSO_REFUSED = frozenset({errno.EIO, errno.EINVAL, errno.EMSGSIZE, errno.ENOPROTOOPT, errno.EOPNOTSUPP})


class UdpPort(SocketPort):
    """One bound UDP socket.

    ``port=0`` lets the OS choose; :attr:`address` tells which.  Without a
    ``scheduler`` the port still sends and receives; callers then select on
    :meth:`fileno` themselves.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        scheduler: Any | None = None,
        buffer_size: int = DEFAULT_BUFFER,
        gro: bool = False,
    ) -> None:
        family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            sock.bind((host, port))
        except BaseException:
            sock.close()
            raise
        limit = UDP_MAX_IPV6 if family == socket.AF_INET6 else UDP_MAX_IPV4
        super().__init__(sock, limit, scheduler, buffer_size)
        self._address = sock.getsockname()
        self._watch: socket.socket | None = None
        self._gso = _probe(sock, _UDP_SEGMENT, 0)
        self._gro = gro and _probe(sock, _UDP_GRO, 1)
        self._gso_cmsg: dict[int, list[tuple[int, int, bytes]]] = {}
        self._backlog: deque[tuple[bytes, Address]] = deque()
        self._cmsg_space = socket.CMSG_SPACE(4)
        if not self._gro:
            # the plain socket path, without a dispatch through this class per read
            self.receive_many = super().receive_many  # type: ignore[method-assign]

    @property
    def gso(self) -> bool:
        """Whether :meth:`send_segments` hands runs of datagrams to the kernel."""
        return self._gso

    @property
    def gro(self) -> bool:
        """Whether the kernel joins arriving runs (``gro=True`` and supported)."""
        return self._gro

    def send_segments(self, data: bytes, segment: int, address: Address) -> int:
        if not self._gso or len(data) <= segment:
            return super().send_segments(data, segment, address)
        if not 0 < segment <= self._max:
            raise ValueError(f"segment size must be 1..{self._max}, got {segment}")
        # One sendmsg carries at most 64 segments and one IP datagram's worth.
        per_call = min(_GSO_MAX_SEGMENTS, self._max // segment) * segment
        if per_call < 2 * segment:
            return super().send_segments(data, segment, address)
        cmsg = self._gso_cmsg.get(segment)
        if cmsg is None:
            cmsg = self._gso_cmsg[segment] = [(_SOL_UDP, _UDP_SEGMENT, struct.pack("=H", segment))]
        view = memoryview(data)
        sendmsg = self._sock.sendmsg
        sent = 0
        for offset in range(0, len(view), per_call):
            chunk = view[offset : offset + per_call]
            try:
                sendmsg((chunk,), cmsg, 0, address)
            except OSError as error:
                if error.errno in _GSO_REFUSED and not self._closed:
                    # This path (device, route) cannot segment: never again.
                    self._gso = False
                    return sent + super().send_segments(view[offset:], segment, address)
                if not self._send_failed(error, chunk, address):
                    return sent  # EAGAIN: nothing of this chunk left
            count = -(-len(chunk) // segment)
            sent += count
            self._sent += count  # datagrams, as send counts them
        return sent

    def receive_many(self, limit: int) -> list[tuple[bytes, Address]]:
        if not self._gro:
            return super().receive_many(limit)
        out: list[tuple[bytes, Address]] = []
        backlog = self._backlog
        while backlog and len(out) < limit:
            out.append(backlog.popleft())
        recvmsg = self._sock.recvmsg
        space = self._cmsg_space
        reads = 0
        while len(out) < limit and reads <= limit:
            try:
                data, ancillary, flags, source = recvmsg(_GRO_BUFFER, space)
            except BlockingIOError:
                break
            except InterruptedError:
                continue
            except OSError as error:
                if self._closed or error.errno == errno.EBADF:
                    raise
                self._events["receive_errors"] += 1
                reads += 1
                continue
            reads += 1
            if flags & socket.MSG_TRUNC:
                self._events["oversized"] += 1
                continue
            size = 0
            for level, kind, value in ancillary:
                if level == _SOL_UDP and kind == _UDP_GRO and len(value) >= 4:
                    size = struct.unpack("=i", value[:4])[0]
            if 0 < size < len(data):
                for offset in range(0, len(data), size):
                    item = (data[offset : offset + size], source)
                    if len(out) < limit:
                        out.append(item)
                    else:
                        backlog.append(item)
            elif len(data) <= self._max:
                out.append((data, source))
            else:
                self._events["oversized"] += 1
        self._received += len(out)
        return out

    def kernel_drops(self) -> int | None:
        """Datagrams the kernel dropped for this socket (its receive buffer
        was full), from /proc/net/udp[6]; None where that is not readable.

        Loss a stack never sees is still loss: this is how to count it.
        """
        try:
            inode = str(os.fstat(self._sock.fileno()).st_ino)
        except OSError:
            return None
        for table in ("/proc/net/udp", "/proc/net/udp6"):
            try:
                with open(table) as lines:
                    next(lines, None)
                    for line in lines:
                        fields = line.split()
                        if len(fields) > 12 and fields[9] == inode:
                            return int(fields[-1])
            except (OSError, ValueError):
                continue
        return None

    def _write_watch(self) -> socket.socket:
        # A duplicate descriptor of the same socket: its writability is the
        # socket's, and it can sit in a selector next to the read
        # registration of the original without the two colliding.
        if self._watch is None:
            self._watch = self._sock.dup()
        return self._watch

    def _close_extra(self) -> None:
        if self._watch is not None:
            self._watch.close()
            self._watch = None


def _probe(sock: socket.socket, option: int, value: int) -> bool:
    """Whether this kernel knows a UDP socket option (GSO, GRO)."""
    try:
        sock.setsockopt(_SOL_UDP, option, value)
    except OSError:
        return False
    return True
