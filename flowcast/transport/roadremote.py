"""The road's records of its peers: a Remote, and the join and allow it has under way.

Plain state with no behaviour of its own beyond keeping its counts true
(``Remote.address`` keeps the stack's count of addresses where remotes
are, ``Remote.requeue`` the backlog's bytes): the roles that act on them
live in roadjoin.py, roadallow.py, roaddue.py and roadpath.py.
"""

from __future__ import annotations

import os

from flowcast.runtime.scheduler import Event
from flowcast.transport import handshake as hs
from flowcast.transport.keep import RemoteRecord
from flowcast.transport.port import Address
from flowcast.transport.presence import Presence
from flowcast.transport.reliable import Outgoing
from flowcast.transport.session import Session

__all__ = ["Remote", "JoinAttempt", "Allowing", "random32"]


def random32() -> int:
    while True:
        value = int.from_bytes(os.urandom(4), "big")
        if value:
            return value


class Allowing:
    """An allow this stack initiated; lives until ALLOW_ACK or its deadline."""

    __slots__ = ("tag", "short", "stage", "packet", "next_send", "interval", "deadline", "session")

    def __init__(self, tag: int, now: float, deadline: float) -> None:
        self.tag = tag
        self.short = hs.ShortTerm()
        self.stage = "hello"
        self.packet = b""
        self.next_send = now
        self.interval = 0.1
        self.deadline = deadline
        self.session: Session | None = None


class JoinAttempt:
    """A join this stack sent; ``result`` becomes accepted, pending, refused or timeout."""

    __slots__ = ("tag", "nonce", "address", "packet", "next_send", "interval", "deadline", "_result", "reason", "cookie_used", "answered")

    def __init__(self, tag: int, address: Address, packet: bytes, nonce: bytes, now: float, deadline: float) -> None:
        self.tag = tag
        self.nonce = nonce
        self.address = address
        self.packet = packet
        self.next_send = now
        self.interval = 0.1
        self.deadline = deadline
        self._result: str | None = None
        self.reason = ""
        self.cookie_used = False  # answered a JOIN_COOKIE since the last send (one per send: no ping-pong)
        #: Set when ``result`` first gets a value: a joiner waits on it, not a poll.
        self.answered = Event()

    @property
    def result(self) -> str | None:
        return self._result

    @result.setter
    def result(self, value: str | None) -> None:
        self._result = value
        if value is not None:
            self.answered.set()


class Remote:
    """A remote estate as this stack knows it."""

    __slots__ = (
        "record",
        "named",
        "_address",
        "_places",
        "session",
        "allowing",
        "presence",
        "last_heard",
        "last_sent",
        "backlog",
        "backlog_bytes",
        "next_allow",
        "last_ping",
        "probes",
        "due",
        "admits",
        "admits_version",
        "admits_until",
    )

    def __init__(self, record: RemoteRecord, address: Address | None, places: dict[Address, int] | None = None) -> None:
        self.record = record
        self.named: str | None = None  # the name it holds in the stack's _by_name, if any
        self._address: Address | None = None
        self._places = places
        self.address = address
        self.session: Session | None = None
        self.allowing: Allowing | None = None
        self.presence = Presence.JOINED
        self.last_heard = 0.0
        self.last_sent = 0.0
        self.backlog: list[Outgoing] = []
        self.backlog_bytes = 0  # of the messages in backlog (kept by RoadStack._submit, Allows.established, Deadlines.expire_backlog)
        self.next_allow = 0.0
        self.last_ping = 0.0
        self.probes: dict[Address, tuple[int, float]] = {}  # candidate address -> (token, until)
        self.due: float | None = None  # its deadline as the stack's heap has it (None: none there)
        #: The largest message it may send, as the road's allowance last said (-1: no allowance, any
        #: message the road takes), the allowance's version then, and until when (admission.py).
        self.admits = -1
        self.admits_version = -1
        self.admits_until = float("inf")

    @property
    def address(self) -> Address | None:
        return self._address

    @address.setter
    def address(self, value: Address | None) -> None:
        # Kept in the stack's count of addresses where remotes are: the
        # token bucket asks it per handshake under a flood (no scan).
        places = self._places
        if places is not None and value != self._address:
            old = self._address
            if old is not None:
                left = places.get(old, 0) - 1
                if left > 0:
                    places[old] = left
                else:
                    places.pop(old, None)
            if value is not None:
                places[value] = places.get(value, 0) + 1
        self._address = value

    @property
    def name(self) -> str:
        return self.record.name

    def requeue(self, msgs: list[Outgoing], *, front: bool = False) -> None:
        """Put ``msgs`` back to wait for this remote (before what waits, with ``front``), counting their bytes."""
        if front:
            self.backlog[:0] = msgs
        else:
            self.backlog.extend(msgs)
        self.backlog_bytes += sum(len(m.data) for m in msgs)

    @property
    def fingerprint(self) -> str:
        return self.record.fingerprint

    def __repr__(self) -> str:
        return f"<Remote {self.name} {self.fingerprint[:12]} {self.presence.value} at {self.address!r}>"
