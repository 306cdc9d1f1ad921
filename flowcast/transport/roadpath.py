"""PathCheck: a remote's address moves only once the new one answers a challenge.

An authentic datagram from a new source address proves the key holder
sent it, not that the key holder is there: an observer can race a copy of
it from its own address.  So a roaming remote (or that observer) is sent a
PATH_CHALLENGE at the new address, and the address changes only when a
PATH_RESPONSE carrying the token comes back from there, authentic.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from flowcast.transport.port import Address
from flowcast.transport.roadremote import Remote
from flowcast.transport.session import Session
from flowcast.transport.wire import PATH, ChunkKind

if TYPE_CHECKING:
    from flowcast.transport.road import RoadStack

__all__ = ["PathCheck", "PROBES", "PROBE_LIFE"]

#: Candidate addresses challenged at once per remote.
PROBES = 4
#: Seconds a challenge waits for its answer (and before the same address is asked again).
PROBE_LIFE = 1.0


class PathCheck:
    """Path validation of one road: challenges out, responses in."""

    def __init__(self, stack: RoadStack) -> None:
        self.stack = stack

    def challenge(self, remote: Remote, session: Session, address: Address, now: float) -> None:
        """Ask ``address`` to prove it receives for ``remote`` (at most one challenge a second per address)."""
        probes = remote.probes
        held = probes.get(address)
        if held is not None and held[1] > now:
            return  # one challenge at a time per candidate address
        if len(probes) >= PROBES:
            for old in [a for a, (_, until) in probes.items() if until <= now] or [next(iter(probes))]:
                del probes[old]
        token = int.from_bytes(os.urandom(8), "big")
        probes[address] = (token, now + PROBE_LIFE)
        body = PATH.pack(ChunkKind.PATH_CHALLENGE, 0, token)
        counter, datagram = session.seal(body)
        session.link.sent(counter, len(body), None, now)
        stack = self.stack
        stack._dirty[remote] = None
        stack.counts["path_challenges"] += 1
        stack._emit(datagram, address)

    def on_path(self, kind: int, token: int) -> None:
        """A link read a PATH chunk of the datagram the stack is reading (``stack._source``)."""
        source = self.stack._source
        if source is None:
            return
        remote, address = source
        if kind == ChunkKind.PATH_CHALLENGE:
            session = remote.session
            if session is not None:
                session.link.path_answers.append(token)
        else:
            held = remote.probes.get(address)
            if held is not None and held[0] == token:
                remote.address = address  # validated: the key holder answers there
                remote.probes.clear()
                self.stack.counts["path_validated"] += 1
