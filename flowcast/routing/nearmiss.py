"""A ``did you mean`` for a message addressed to a share that is not there (``no_share``).

A typo in a route's share name is the commonest way a first flow fails; the
refusal should name the share that was meant.  Two costs are kept in hand:

* **Disclosure.**  The refusal goes back to the sender.  A sender of this
  estate (its own houses) is told any near name.  A remote estate is told
  only names this estate's policy lets it write anyway: it could find
  those by writing to them, so naming them tells it nothing new, and it
  never learns of a share it may not touch.  This estate's operator (log,
  ``flowcast status``) always gets the near name.
* **CPU.**  Matching names costs about 2.4 us per share with difflib
  (1.5 ms over 512 names), but far more for long names of repeated letters
  (90 ms over 256 names of 64 ``b``s), and a hostile estate can send
  misaddressed messages as fast as the road carries them.  So a router
  makes at most :data:`RATE` suggestions a second (a token bucket on the
  router's clock), each over at most :data:`MAX_NAMES` shares, for a name
  of at most :data:`MAX_LENGTH` characters, and stops looking after
  :data:`BUDGET` seconds: at worst about 15 ms of CPU a second, 1.5% of a
  core.  Past any limit the refusal says what it always said, with no
  suggestion (or the nearest name found in the time).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from difflib import SequenceMatcher
from typing import Any

__all__ = ["BUDGET", "MAX_LENGTH", "MAX_NAMES", "RATE", "NearMiss", "nearest"]

#: Suggestions a router makes per second at most (and in a burst): a hint for a person, not a service.
RATE = 5.0
#: Shares a suggestion looks at, at most: a house with more gets none (matching would cost too much).
MAX_NAMES = 1024
#: The longest misaddressed name a suggestion is sought for (a typo is in a name a person wrote).
MAX_LENGTH = 64
#: Seconds one suggestion may take, checked before each name.
BUDGET = 0.002
_CUTOFF = 0.6  # as difflib.get_close_matches and flowcast.errors.did_you_mean


def nearest(name: str, candidates: Iterable[str], budget: float = BUDGET, clock: Callable[[], float] = time.perf_counter) -> str | None:
    """The candidate most like ``name`` (ratio at least 0.6), looking for at most ``budget`` seconds.

    difflib's own ranking (get_close_matches) with a clock: it cannot be
    told to stop, and a pathological pair of names can cost a millisecond.
    """
    matcher = SequenceMatcher()
    matcher.set_seq2(name)
    best, best_ratio = None, _CUTOFF
    end = clock() + budget
    for candidate in candidates:
        if clock() > end:  # a clock read (~0.1 us) beside a ratio (2 us to 350 us): every name
            break
        matcher.set_seq1(candidate)
        if matcher.real_quick_ratio() >= best_ratio and matcher.quick_ratio() >= best_ratio:
            ratio = matcher.ratio()
            if ratio > best_ratio or (ratio == best_ratio and best is None):
                best, best_ratio = candidate, ratio
    return best


class NearMiss:
    """One router's near-name suggestions, with their budget."""

    __slots__ = ("_now", "_tokens", "_at", "skipped")

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._tokens = RATE
        self._at = now()
        #: Refusals that got no suggestion because the budget was spent (or the store too big).
        self.skipped = 0

    def _take(self) -> bool:
        now = self._now()
        self._tokens = min(RATE, self._tokens + (now - self._at) * RATE)
        self._at = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    def suggest(self, router: Any, name: str, sender: Any, tag: str) -> tuple[str, str]:
        """``(for the sender, for the operator)``: each ``did you mean 'x'?`` or ''.

        ``sender`` is the message's source route; one of another estate is
        told only a name the policy lets it write with ``tag`` (module docstring).
        """
        store = router.store
        if len(store) > MAX_NAMES or len(name) > MAX_LENGTH or not self._take():
            self.skipped += 1
            return "", ""
        meant = nearest(name, (n for n in store if not n.startswith("flowcast.")))
        if meant is None:
            return "", ""
        hint = f"did you mean {meant!r}?"
        if sender.estate == router.estate:
            return hint, hint
        try:  # the manor knows the remote's role; a house behind it judges as for no role (fewer rules match)
            role = router.roads[sender.channel].remote(sender.estate).record.role
        except (KeyError, AttributeError):
            role = ""
        allowed = router.policy.allows("write", sender.estate, role, meant, tag, sender.channel)
        return (hint if allowed else ""), hint
