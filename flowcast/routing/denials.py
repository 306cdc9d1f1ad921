"""Denials: the router's recent refusals, kept for `flowcast status` and logged within a budget.

A refusal is counted by its kind wherever it happens; this keeps the last
hundred in full (what, why, from whom, to whom, when on the router's clock)
and logs at most ten a second, so a flood of bad messages cannot turn the
log into the attack's amplifier.  What was not logged is counted.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable
from typing import Any

from flowcast.runtime.tokenbucket import TokenBucket

__all__ = ["Denials", "LOG_PER_SECOND"]

#: Refusals logged a second at most; the rest are counted as ``notes_unlogged``.
LOG_PER_SECOND = 10.0


class Denials(deque):
    """The last ``maxlen`` refusals as plain dicts, newest last."""

    def __init__(self, clock: Callable[[], float], counts: Counter[str], log: Any, maxlen: int = 100) -> None:
        super().__init__(maxlen=maxlen)
        self._clock = clock
        self._counts = counts
        self._log = log
        self._budget = TokenBucket(LOG_PER_SECOND, at=clock())

    def returned(self, kind: str, reason: str, src: Any, dst: Any) -> None:
        """An error that came back for a message sent from here: logged within the same budget
        (a remote that floods error reports gets no more log lines than one that floods messages)."""
        if self._budget.take(self._clock()):
            self._log.warning("error back from %s for %s: %s: %s", src, dst, kind, reason[:200])
        else:
            self._counts["notes_unlogged"] += 1

    def note(self, kind: str, reason: str, src: Any, dst: Any, tag: str) -> None:
        now = self._clock()
        entry = {
            "at": now,  # router clock seconds; the status writer turns it into wall time
            "kind": kind,
            "reason": reason,
            "src": "" if src is None else str(src),
            "dst": "" if dst is None else str(dst),
            "tag": tag,
        }
        self.append(entry)
        if self._budget.take(now):
            self._log.warning("%s: %s (src %s, dst %s, tag %r)", kind, reason, entry["src"], entry["dst"], tag)
        else:
            self._counts["notes_unlogged"] += 1
