"""Yard: what one lane stack knows of another yard (house) of its host.

A record, no behaviour: its address, the links of a raw lane (one to
send, one per boot id heard to receive) or the one link of an
acknowledged lane, the boot ids heard, the HELLO probing of a yard not
heard from yet, and the MAC keys of an authenticated lane.  lane.py acts
on it.
"""

from __future__ import annotations

from collections import deque

from flowcast.transport.lanekeys import YardMac
from flowcast.transport.port import Address
from flowcast.transport.reliable import Link

__all__ = ["Yard", "PROBE_FIRST", "PROBE_MAX", "RETIRED"]

PROBE_FIRST = 0.05  # HELLO to a yard not heard from yet, while messages wait for it
PROBE_MAX = 2.0
RETIRED = 8  # earlier boot ids of a yard remembered, so late datagrams of theirs are dropped


class Yard:
    """Another yard as one lane stack knows it."""

    __slots__ = (
        "name",
        "address",
        "tx",
        "rx",
        "rx_boot",
        "counter",
        # acknowledged mode
        "peer",
        "link",
        "retired",
        "hello_due",
        "last_hello",
        "next_probe",
        "probe_every",
        "mac",
    )

    def __init__(self, name: str, address: Address, tx: Link | None) -> None:
        self.name = name
        self.address = address
        self.tx = tx  # raw mode
        self.rx: Link | None = None
        self.rx_boot = -1
        self.counter = 0  # raw: datagrams sent; acked: next packet counter of the link
        self.peer = 0  # acked: the yard's boot id as last heard (0: not heard yet)
        self.link: Link | None = None  # acked: both directions, for (self.boot, peer)
        self.retired: deque[int] = deque(maxlen=RETIRED)
        self.hello_due = False
        self.last_hello = -1.0
        self.next_probe = 0.0
        self.probe_every = PROBE_FIRST
        self.mac: YardMac | None = None  # authenticated lanes
