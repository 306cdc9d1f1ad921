"""An operator's rejection, rotation or forgetting of a key, seen by a running road stack.

The join path reads a key's record back before it admits a JOIN, but an
allow needs no JOIN: a key that still holds a session's secrets (perhaps a
stolen one) could skip the join and allow, with its name's authority, until
a restart.  So the responder looks at the key's record on disk before it
makes a session (keeplook.look_key, at most once a second per key), and the
:class:`Sweep` looks at the records of live sessions, a bounded number a
second, so a session begun before the operator acted ends too.

A refused key is retired as a rotation picked up at a JOIN is: its
sessions end, and what it had not delivered goes to the name's new key,
or fails (``remote forgotten``) when there is none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flowcast.transport.keeplook import look_key
from flowcast.transport.presence import Presence

if TYPE_CHECKING:
    from flowcast.transport.keep import Verdict
    from flowcast.transport.road import Remote, RoadStack

__all__ = ["SWEEP_LOOKS", "may_allow", "revoke", "Sweep"]

#: Records of live sessions read per second at most: a session of a key an
#: operator rejected ends within about ``sessions / SWEEP_LOOKS`` seconds.
SWEEP_LOOKS = 32


def may_allow(stack: "RoadStack", remote: "Remote", now: float) -> bool:
    """May an authenticated INITIATE of ``remote`` make a session?  Refused (counted) if not accepted on disk."""
    verdict = look_key(stack.keep, remote.record, now)
    if verdict is None:
        return True
    stack.counts["allow_revoked"] += 1
    revoke(stack, remote, verdict, f"allow refused to {remote.name} {remote.fingerprint}")
    return False


def revoke(stack: "RoadStack", remote: "Remote", verdict: "Verdict", what: str) -> None:
    """``remote``'s key is no longer accepted on disk: end it, its messages to the successor (if any)."""
    fp = remote.fingerprint
    for note in verdict.events:
        if note.startswith("rotated "):
            stack.counts["rotations"] += 1
        stack._event_note(note)
    stack._set_presence(remote, Presence.DEAD)  # no one holds the name at this key now
    carried = stack._joins.retire(fp)
    heir = stack._table.add(verdict.successor, None) if verdict.successor is not None else remote
    heir.requeue(carried)
    stack._table.drop(fp)  # fails what is still its own (no successor)
    stack._event_note(f"{what}: {verdict.reason}")


class Sweep:
    """Looks at live sessions' records on disk, ``rate`` a second at most, round robin.

    Run from the stack's timers (a live session has a heartbeat, so they
    run at least once per ``alive_interval``); the list of sessions is
    taken anew once per round, so a round costs O(sessions) once.
    """

    def __init__(self, rate: int = SWEEP_LOOKS) -> None:
        self.rate = rate
        self.at = 0.0
        self._round: list[str] = []

    def run(self, stack: "RoadStack", now: float) -> None:
        self.at = now + 1.0
        if stack.keep.path is None:
            return
        todo = self._round
        if not todo:
            todo.extend({remote.record.fingerprint: None for remote, _ in stack._sessions.values()})
        for _ in range(min(self.rate, len(todo))):
            remote = stack.remotes.get(todo.pop())
            if remote is None or remote.session is None:
                continue
            verdict = look_key(stack.keep, remote.record, now)
            if verdict is not None:
                stack.counts["session_revoked"] += 1
                revoke(stack, remote, verdict, f"session ended of {remote.name} {remote.fingerprint}")
