"""What a road's peer may send, asked before the road holds or decodes any of it.

A road is below routing and cannot read a policy, yet it is the road that
spends memory on a peer's message (reassembly holds its pieces) and CPU
(msgpack decodes it) long before the router looks at the rules.  An
estate that no rule admits could make a road hold and decode 64 MiB
messages only for the router to refuse each one.  So the layer above
gives the road an :class:`Allowance`, and the road asks it, per remote,
for the largest message that remote may send now: 0 when nothing it
sends can be admitted (then the road holds no piece of it and drops
what comes whole, undecoded), a small size when only short answers are due
(error reports for what this estate sent), any size when a rule admits
it.  The answer lowers that peer's hold limit (what reassembly holds for
it) and bounds what is delivered; a stack with an allowance delivers only
messages sent as bytes (the router reads its parcels itself, after
policy), so nothing is decoded before policy.

Every drop is counted in the stack's ``counts`` (``not_admitted``,
``over_allowance``, ``not_bytes``) and told to the allowance, which the
router counts and notes among its denials.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from flowcast.transport.wire import F_RAW

if TYPE_CHECKING:
    from flowcast.transport.reliable import Link
    from flowcast.transport.road import RoadStack
    from flowcast.transport.roadremote import Remote
    from flowcast.transport.session import Session

__all__ = ["Allowance", "RoadAdmission", "ANY_SIZE", "NOT_ADMITTED", "OVER_ALLOWANCE", "NOT_BYTES", "HOLD_SLACK", "HOLD_FLOOR", "hold_limit"]

#: What an allowance answers for a peer whose messages may be of any size (the road's own limit applies).
ANY_SIZE = 1 << 62
#: Why a peer's message was dropped before it was held or decoded (the stack's counts, the allowance's word).
NOT_ADMITTED = "not_admitted"  # nothing the peer sends can be admitted now
OVER_ALLOWANCE = "over_allowance"  # larger than what the peer may send now
NOT_BYTES = "not_bytes"  # sent as msgpack or JSON for the road to decode: the layer above reads only bytes
#: What a peer allowed ``n``-byte messages may hold beyond twice ``n``: a few pieces' books.
HOLD_SLACK = 16 << 10
#: What a peer allowed nothing may hold: the SKIPs its failed messages leave (80 B each, freed at
#: once when next), never a piece.  At 0 its SKIPs could not be taken and its stream would stop for good.
HOLD_FLOOR = 1 << 10
_INF = float("inf")


class Allowance(Protocol):
    """The layer above a road, asked what each remote may send (the router's policy and reply book)."""

    @property
    def version(self) -> int:
        """Changes whenever an answer of :meth:`largest` may have changed (rules replaced, a reply now due)."""
        ...

    def largest(self, estate: str, role: str, now: float) -> tuple[int, float]:
        """The largest message ``estate`` (of ``role``) may send now, in bytes (0: none), and until when
        that answer holds unless ``version`` changes first."""
        ...

    def dropped(self, estate: str, size: int, reason: str) -> None:
        """A ``size``-byte message of ``estate`` was dropped before it was held or decoded, for ``reason``."""
        ...


def hold_limit(largest: int, max_message: int) -> int | None:
    """What a link may hold for a peer allowed ``largest``-byte messages (None: the link's own limit)."""
    if largest >= max_message:
        return None
    if largest <= 0:
        return HOLD_FLOOR
    return 2 * largest + HOLD_SLACK


class RoadAdmission:
    """A road's side of its allowance: each remote's answer kept current, and the drops it makes."""

    def __init__(self, stack: RoadStack) -> None:
        self.stack = stack
        self.allowance: Allowance | None = None

    def set(self, allowance: Allowance | None) -> None:
        """Ask ``allowance`` from now on (None: every remote may send what the road takes)."""
        self.allowance = allowance
        now = self.stack.clock.now()
        for remote in self.stack.remotes.values():
            self.refresh(remote, remote.session, now)

    def refresh(self, remote: Remote, session: Session | None, now: float) -> None:
        """Ask again what ``remote`` may send, and hold its links to it (``session``'s too, if half-made)."""
        allowance = self.allowance
        stack = self.stack
        if allowance is None:
            remote.admits, remote.admits_version, remote.admits_until = -1, -1, _INF
            limit = None
        else:
            largest, until = allowance.largest(remote.name, remote.record.role, now)
            remote.admits = max(0, min(int(largest), stack.max_message))
            remote.admits_version = allowance.version
            remote.admits_until = until
            limit = hold_limit(remote.admits, stack.max_message)
        for held in (session, remote.session):
            if held is not None:
                held.link.limit_holding(limit)

    def fit(self, remote: Remote, link: Link) -> None:
        """A new link of ``remote``: held to what the remote may send."""
        if self.allowance is not None:
            self.refresh(remote, None, self.stack.clock.now())
            link.limit_holding(hold_limit(remote.admits, self.stack.max_message))

    def drop(self, remote: Remote, flags: int, payload: bytes) -> None:
        """A whole message of ``remote`` it may not send: counted and told, never decoded."""
        admits = remote.admits
        reason = NOT_ADMITTED if admits == 0 else NOT_BYTES if not flags & F_RAW else OVER_ALLOWANCE
        self._dropped(remote, len(payload), reason)

    def refused(self, remote: Remote, size: int) -> None:
        """A body of ``remote`` its link would not hold, the hold limit its allowance set or the budget
        (unacknowledged: an honest sender resends it, or fails its message by its timeout)."""
        self._dropped(remote, size, NOT_ADMITTED if remote.admits == 0 else OVER_ALLOWANCE)

    def _dropped(self, remote: Remote, size: int, reason: str) -> None:
        self.stack.counts[reason] += 1
        allowance = self.allowance
        if allowance is not None:
            try:
                allowance.dropped(remote.name, size, reason)
            except Exception:  # noqa: BLE001 - the layer above's bug must not take the road down
                self.stack.counts["internal_errors"] += 1
