"""What each estate may send on one road: the router's answer to the road's question (transport/admission.py).

The road asks before it holds or decodes anything of a peer's message, so
the answer must come from what the router knows without reading that
message.  Any size, when a rule of the policy could admit something from
the estate (its name, role, the road's channel), or when this house sent
it a ``read`` whose ``value`` is owed.  Otherwise UNADMITTED_BYTES: room
for an error report about what this house sent there, and for a short
message the router refuses as ``denied``, so a peer that was given no
rule hears why (the router reads such a message's header, never its
data).  Anything larger from it is dropped before it is held.  The answer
errs towards letting in -- a rule for one share admits the estate whole --
and the router still judges each message it gets.  What the road dropped
is counted in the router's counts (``not_admitted`` for an estate no rule
admits, else the road's reason) and noted among its denials, at most once
a second per estate, with the rule that would let it in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from flowcast.routing.replies import MAX_ERROR_PARCEL, REPLY_WINDOW
from flowcast.transport.admission import ANY_SIZE, NOT_ADMITTED, OVER_ALLOWANCE

__all__ = ["RoadAllowance", "ESTATES_OWED", "UNADMITTED_BYTES"]

#: The largest message an estate no rule admits may send (see above): an error report's most.
UNADMITTED_BYTES = MAX_ERROR_PARCEL
#: Estates a road's allowance remembers values are owed by (past it, it starts again: each
#: send registers anew, and answers due meanwhile are judged by the rules alone).
ESTATES_OWED = 4096
#: Seconds between two denials noted for one estate's dropped messages (the count is kept for all).
NOTE_EVERY = 1.0
_INF = float("inf")


class _Rules(Protocol):
    version: int

    def admits_any(self, estate: str, role: str, channel: str) -> bool: ...


class _Notes(Protocol):
    def note(self, kind: str, reason: str, src: Any, dst: Any, tag: str) -> None: ...


class RoadAllowance:
    """The :class:`~flowcast.transport.admission.Allowance` of one road (``channel``) of a router."""

    def __init__(
        self, policy: Callable[[], _Rules], channel: str, clock: Callable[[], float], counts: Any, denials: _Notes
    ) -> None:
        self._policy = policy
        self.channel = channel
        self._clock = clock
        self._counts = counts
        self._denials = denials
        self._reads: dict[str, float] = {}  # estate -> until when a read's value is owed by it
        self._noted: dict[str, float] = {}  # estate -> when a drop of its messages was last noted
        self._changes = 0
        self._seen: Any = None
        self._seen_version = -1

    @property
    def version(self) -> int:
        policy = self._policy()
        if policy is not self._seen or policy.version != self._seen_version:
            self._seen, self._seen_version = policy, policy.version
            self._changes += 1
        return self._changes

    def largest(self, estate: str, role: str, now: float) -> tuple[int, float]:
        if self._policy().admits_any(estate, role, self.channel):
            return ANY_SIZE, _INF
        until = self._reads.get(estate, 0.0)
        if until > now:
            return ANY_SIZE, until
        return UNADMITTED_BYTES, _INF

    def sent(self, estate: str, tag: str, now: float) -> None:
        """A flow's message (of ``tag``) goes to ``estate`` by this road: a ``read``'s value is owed for a while."""
        if tag != "read":
            return
        reads = self._reads
        until = reads.get(estate)
        if until is not None and until - now >= REPLY_WINDOW / 2:
            return  # owed already, for long enough
        if until is None and len(reads) >= ESTATES_OWED:
            reads.clear()
            self._changes += 1  # what was owed is not any more: asked again
        reads[estate] = now + REPLY_WINDOW
        if until is None or until <= now:
            self._changes += 1  # more is allowed now: the road asks again before its next datagram

    def dropped(self, estate: str, size: int, reason: str) -> None:
        if reason == OVER_ALLOWANCE and self._reads.get(estate, 0.0) <= self._clock():
            reason = NOT_ADMITTED  # (had a rule admitted it, it would have been allowed any size)
        self._counts[reason] += 1
        now = self._clock()
        noted = self._noted
        if now - noted.get(estate, -_INF) < NOTE_EVERY:
            return
        if len(noted) >= ESTATES_OWED:
            noted.clear()
        noted[estate] = now
        self._denials.note(
            reason,
            f"a {size}-byte message from estate {estate!r} on road {self.channel!r} dropped before it was held or decoded ({reason}); "
            f"to allow it: {{allow: write, estate: {estate}}}",
            None,
            None,
            "",
        )
