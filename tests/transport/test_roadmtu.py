"""Which datagram size a road uses per remote (transport/roadmtu.py): the decision itself.

Whether a remote on another host really gets datagrams its path carries whole
is tests/transport/test_netns_mtu.py's, across two network namespaces.
"""

from __future__ import annotations

import pytest

from flowcast.transport.roadmtu import PATH_SAFE, datagram_for, is_loopback


@pytest.mark.parametrize("address, loopback", [
    (("127.0.0.1", 7530), True), (("127.8.9.10", 1), True), (("::1", 7530, 0, 0), True),
    (("10.0.0.2", 7530), False), (("192.168.1.5", 9), False), (("2001:db8::1", 7530, 0, 0), False),
    (("fe80::1%eth0", 7530, 0, 2), False), (("not an ip", 1), False), ("beta", False), ((), False), (None, False),
])
def test_loopback_is_told_apart(address, loopback) -> None:
    assert is_loopback(address) is loopback


def test_a_remote_on_another_host_gets_path_safe_datagrams_and_loopback_the_largest() -> None:
    assert PATH_SAFE == 1280 - 40 - 8
    assert datagram_for(("10.0.0.2", 7530), None, 65507) == 1232
    assert datagram_for(("127.0.0.1", 7530), None, 65507) == 65507
    assert datagram_for("beta", None, 65507) == 65507  # a simulated network's name: no path to fragment
    assert datagram_for(("10.0.0.2", 7530), 9000, 65507) == 9000  # a layout's size is every remote's
    assert datagram_for(("127.0.0.1", 7530), 1400, 65507) == 1400
    assert datagram_for(("10.0.0.2", 7530), 70000, 65507) == 65507  # never more than the port carries
