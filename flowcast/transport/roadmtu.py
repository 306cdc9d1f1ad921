"""How large a road's datagrams are, per remote: loopback-sized on one host, MTU-safe between hosts.

A datagram larger than the path's MTU is fragmented by IP, and one lost
fragment loses the whole datagram; many networks drop fragments outright
(RAET capped its packets at about 1 KB for this reason).  So a road sends
to another host in datagrams of :data:`PATH_SAFE` bytes of UDP payload --
what fits the IPv6 minimum MTU of 1,280 (less 40 for the IPv6 header and 8
for UDP), so it crosses any path, tunnels included -- and keeps the large
datagrams the port carries for a remote on loopback, where nothing is
fragmented or lost on the way.  A layout (or ``RoadStack(datagram_size=)``)
may set one size for every remote of a road instead: larger on a network
known to carry 9,000-byte packets end to end, smaller under a tunnel.

Decided once per session, when its link is made.  A session that roams
(path validation, roadpath.py) keeps its size: a remote on loopback is on
this host and does not move off it, and one that moves between two other
hosts keeps the path-safe size.
"""

from __future__ import annotations

import ipaddress
from typing import Any

__all__ = ["MIN_DATAGRAM", "PATH_SAFE", "datagram_for", "is_loopback"]

#: UDP payload that fits the IPv6 minimum MTU (1,280 - 40 - 8): safe on any path.
PATH_SAFE = 1232
#: The smallest datagram size a road accepts (a segment must carry its header, MAC and some payload).
MIN_DATAGRAM = 512


def is_loopback(address: Any) -> bool:
    """Whether ``address`` is on this host's loopback (``(host, port, ...)``; anything else is not)."""
    if not isinstance(address, tuple) or not address or not isinstance(address[0], str):
        return False
    try:
        return ipaddress.ip_address(address[0].split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def datagram_for(address: Any, configured: int | None, port_max: int) -> int:
    """The datagram size for a remote at ``address``: ``configured`` if the road sets one, else the
    port's largest on loopback (or a simulated network's name), :data:`PATH_SAFE` elsewhere."""
    if configured is not None:
        return min(configured, port_max)
    if is_loopback(address) or not isinstance(address, tuple):
        return port_max
    return min(PATH_SAFE, port_max)
