"""Datagram ports: real sockets and a simulated network.

Every class here implements :class:`flowcast.transport.port.DatagramPort`,
so a stack runs unchanged over loopback UDP, Unix datagrams, or a seeded
simulation on the virtual clock.
"""

from flowcast.transport.ports.sim import Conditions, SimNetwork, SimPort
from flowcast.transport.ports.udp import UDP_MAX_IPV4, UDP_MAX_IPV6, UdpPort
from flowcast.transport.ports.uxd import UXD_DEFAULT_MAX, SocketInUse, UxdPort, uxd_address

__all__ = [
    "Conditions",
    "SimNetwork",
    "SimPort",
    "SocketInUse",
    "UDP_MAX_IPV4",
    "UDP_MAX_IPV6",
    "UXD_DEFAULT_MAX",
    "UdpPort",
    "UxdPort",
    "uxd_address",
]
