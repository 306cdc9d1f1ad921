"""Joining the remote estates a layout names, and what each try was answered, for ``flowcast status``.

An estate whose remote never joins used to show "no presence yet" and
nothing else; the reason (nobody at that address, a refusal and its
reason, a join pending an operator) was only in the house log.  The
micro-thread that keeps trying now writes down, per remote, the address it
tries, how many tries, and the last answer; the house's status file carries
it and ``flowcast status`` shows it beside the remote.
"""

from __future__ import annotations

import logging
from typing import Any

from flowcast.runtime import Scheduler, sleep, wall_now

__all__ = ["JoinTries", "keep_joined"]

log = logging.getLogger("flowcast.estate")

#: What a try's result means, for a person.
_ANSWERS = {
    "timeout": "no answer (nothing there, a firewall, or the estate is down)",
    "refused": "refused",
    "pending": "pending: the estate holds the join for its operator",
    "accepted": "accepted",
}


class JoinTries:
    """One remote's tries: where, how many, the last answer and when (wall time, for a person)."""

    __slots__ = ("address", "tries", "answer", "reason", "at", "retry_in")

    def __init__(self, address: Any) -> None:  # (host, port) on a real road; a simulated network's name
        self.address = address
        self.tries = 0
        self.answer: str | None = None  # the last try's result: timeout, refused, pending, accepted
        self.reason = ""
        self.at: float | None = None
        self.retry_in: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain data for the status file."""
        return {
            "address": f"{self.address[0]}:{self.address[1]}" if isinstance(self.address, tuple) else str(self.address),
            "tries": self.tries,
            "answer": self.answer,
            "reason": self.reason,
            "at": self.at,
            "retry_in": self.retry_in,
        }

    @staticmethod
    def describe(entry: dict[str, Any], now: float) -> str:
        """``entry`` (an :meth:`as_dict` read back) as one line: what is tried and what came back."""
        text = f"trying {entry.get('address', '?')}"
        tries = entry.get("tries")
        if isinstance(tries, int) and tries > 0:
            text += f", {tries} tr{'y' if tries == 1 else 'ies'}"
        answer = entry.get("answer")
        if isinstance(answer, str):
            text += f"; last: {_ANSWERS.get(answer, answer)}"
            reason = entry.get("reason")
            if isinstance(reason, str) and reason and answer != "timeout":
                text += f" ({reason})"
            at = entry.get("at")
            if isinstance(at, (int, float)):
                text += f", {max(now - at, 0.0):.0f} s ago"
        else:
            text += "; no answer yet"
        return text


def keep_joined(road: Any, estate: str, tries: JoinTries, scheduler: Scheduler):  # type: ignore[no-untyped-def]
    """A micro-thread: join ``estate`` at ``tries.address``, and again whenever it is not allowed.

    Estates start in any order and restart: one join at start that times
    out would leave the road unjoined for good.  Tries back off from 1 s to
    30 s; a refusal (a pinned key that changed, a ``never`` policy) is
    logged each time, not hidden, and kept in ``tries`` for the status.
    Each try waits for the road to answer it (``JoinAttempt.answered``),
    never longer than its timeout and a second: a road closed under it
    leaves no thread waiting for good.
    """
    address = tries.address
    where = tries.as_dict()["address"]
    delay = 1.0
    while not road.closed:
        if road.is_allowed(estate):
            delay = 1.0
            tries.retry_in = None
            yield sleep(5.0)
            continue
        timeout = min(delay * 2, 10.0)
        attempt = road.join(address, timeout=timeout)
        tries.tries += 1
        guard = scheduler.call_later(timeout + 1.0, attempt.answered.set)
        try:
            yield attempt.answered.wait()
        finally:
            guard.cancel()
        tries.answer = attempt.result or "timeout"
        tries.reason = attempt.reason or ""
        tries.at = wall_now()
        if attempt.result in ("refused", "pending"):
            log.warning("join %s at %s: %s %s", estate, where, attempt.result, attempt.reason)
        if not road.is_allowed(estate):
            if attempt.result == "accepted":  # joined; the allow handshake that follows is what is waited for
                log.info("join %s at %s: accepted; allowing (checked again in %g s)", estate, where, delay)
            else:
                log.info("join %s at %s: %s; again in %g s", estate, where, attempt.result or "waiting", delay)
            tries.retry_in = delay
            yield sleep(delay)
            delay = min(delay * 2, 30.0)
