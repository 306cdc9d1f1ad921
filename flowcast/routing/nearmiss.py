"""A ``did you mean`` for a message addressed to a share that is not there (``no_share``).

A typo in a route's share name is the commonest way a first flow fails; the
refusal should name the share that was meant.  Two costs are kept in hand:

* **Disclosure.**  The refusal goes back to the sender.  A sender of this
  estate (its own houses) is told any near name.  A remote estate is told
  only names this estate's policy lets it write anyway: it could find
  those by writing to them, so naming them tells it nothing new, and it
  never learns of a share it may not touch.  This estate's operator (log,
  ``flowcast status``) always gets the near name.
* **CPU.**  Matching names costs about 2.4 us per share (difflib; measured
  here: 1.5 ms over 512 names, 9.8 ms over 4,096), and a hostile estate
  can send misaddressed messages as fast as the road carries them.  So a
  router makes at most :data:`RATE` suggestions a second (a token bucket on
  the router's clock) and looks at most :data:`MAX_NAMES` shares: at worst
  about 15 ms of CPU a second, 1.5% of a core.  Past either limit the
  refusal says what it always said, with no suggestion.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flowcast.errors import closest

__all__ = ["MAX_NAMES", "RATE", "NearMiss"]

#: Suggestions a router makes per second at most (and in a burst): a hint for a person, not a service.
RATE = 5.0
#: Shares a suggestion looks at, at most: a house with more gets none (matching would cost too much).
MAX_NAMES = 1024


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
        if len(store) > MAX_NAMES or not self._take():
            self.skipped += 1
            return "", ""
        meant = closest(name, (n for n in store if not n.startswith("flowcast.")))
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
