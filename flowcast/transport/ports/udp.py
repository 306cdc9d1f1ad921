"""A real UDP port: what a road sends its datagrams through.

Addresses are what the socket module uses: ``(host, port)`` for IPv4 and
``(host, port, flowinfo, scope_id)`` for IPv6, hosts as numeric literals --
a host *name* would make ``sendto`` resolve it, blocking, on every call.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from typing import Any

from flowcast.transport.ports._socket import DEFAULT_BUFFER, SocketPort

__all__ = ["UdpPort", "UDP_MAX_IPV4", "UDP_MAX_IPV6"]

#: 65535 less the IPv4 (20) and UDP (8) headers.
UDP_MAX_IPV4 = 65507
#: 65535 less the UDP header; the IPv6 header is outside its payload length.
UDP_MAX_IPV6 = 65527


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
