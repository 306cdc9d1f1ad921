"""ReplyBudget: what a road may send to addresses that have not proven they receive.

A JOIN past the join gate's rate is answered with a cookie (joingate.py):
32 bytes, no state, no key work.  Cheap each, but not free: a flood at full
speed drew 282,000 replies, and the stack's thread spent on answering it
what the established sessions' echoes were waiting for (honest p99 3.9 s, a
new estate joined after 6.5 s).  A source that never proved it receives
may also be a spoofed victim, so what goes to it must stay below what came
from it.  So every reply to an unproven address is spent from:

* an *amplification ledger* per address: bytes sent to it never more than
  ``amplification`` (3, as QUIC before address validation) times the bytes
  received from it.  A JOIN is at least 640 bytes, a cookie 32: this bound
  holds with room; it is there for every other unproven reply (the signed
  answer to a JOIN let through without a cookie) and for what comes next;
* for cookies, the join budget's two buckets (joinbudget.py), in bytes: ``rate`` bytes a
  second in all, and per address a fair share of half of it (never more
  than ``per_source``).  However many addresses a flood uses they get half
  the rate between them and leave the other half as headroom, so an honest
  joiner's first JOIN, from an address with a full bucket, gets its cookie
  at once instead of waiting behind the flood.  (A signed join reply is
  rationed by the join budget's own buckets already: the ledger alone.)

A reply refused is not sent and is counted (``reply_limited``,
``amplification_limited`` in the stack's counts): the honest joiner repeats
its JOIN.  Addresses are (host, port), not prefixes: on loopback and behind
one NAT every estate shares the host, and a prefix's bucket drained by a
flood would lock its honest neighbours out with it.  The state is bounded:
``sources`` addresses, the least recently heard forgotten first.
"""

from __future__ import annotations

from collections import Counter

from flowcast.transport.joinbudget import JoinBudget

__all__ = ["ReplyBudget", "DEFAULT_REPLY_RATE", "DEFAULT_REPLY_SOURCE_RATE", "AMPLIFICATION"]

#: Bytes a second of replies to unproven addresses, all together: 2,048 JOIN cookies.
DEFAULT_REPLY_RATE = 64 << 10
#: Bytes a second one address may get at most: 20 JOIN cookies (a joiner repeats every 0.25 s to 1 s).
DEFAULT_REPLY_SOURCE_RATE = 640
#: Bytes sent to an unproven address per byte received from it, at most.
AMPLIFICATION = 3.0
#: An address's burst, in bytes: five cookies.  A new address may spend two at once -- an honest
#: joiner's first JOIN is answered -- not its whole burst: 400 fresh addresses' bursts, spent
#: together, emptied the shared bucket and the newcomer's cookie waited behind them.
_BURST = 5 * 32
_START = 2 * 32


class ReplyBudget:
    """The amplification ledger and the byte buckets for replies to unproven addresses."""

    def __init__(
        self,
        rate: float = DEFAULT_REPLY_RATE,
        *,
        per_source: float = DEFAULT_REPLY_SOURCE_RATE,
        amplification: float = AMPLIFICATION,
        sources: int = 4096,
    ) -> None:
        if not amplification > 0:
            raise ValueError("reply budget: amplification must be positive")
        burst = max(float(_BURST), per_source / 4)
        self._buckets = JoinBudget(rate, per_source=per_source, burst=burst, sources=sources, start=min(burst, float(_START)))
        self.rate = float(rate)
        self.per_source = float(per_source)
        self.amplification = float(amplification)
        self.sources = sources
        # address -> [bytes received, bytes sent], least recently heard first
        self._ledger: dict[object, list[int]] = {}
        #: sent / sent_bytes: replies that went; reply_limited / amplification_limited: refused, and why.
        self.counts: Counter[str] = Counter()

    def heard(self, address: object, size: int) -> None:
        """``size`` bytes came from ``address`` (before it proved anything)."""
        ledger = self._ledger
        entry = ledger.pop(address, None)
        if entry is None:
            entry = [0, 0]
            if len(ledger) >= self.sources:
                del ledger[next(iter(ledger))]
        entry[0] += size
        ledger[address] = entry

    def take(self, address: object, size: int, now: float, *, rated: bool = True) -> bool:
        """May ``size`` bytes go to ``address`` now?  (Spent if so.)

        ``rated=False``: the ledger only, for a reply whose work the join
        budget already rations (a signed join reply: at most its JOINs).
        """
        entry = self._ledger.get(address)
        if entry is None or entry[1] + size > self.amplification * entry[0]:
            self.counts["amplification_limited"] += 1
            return False
        if rated and not self._buckets.take(address, now, size):
            self.counts["reply_limited"] += 1
            return False
        entry[1] += size
        self.counts["sent"] += 1
        self.counts["sent_bytes"] += size
        return True

    def ratio(self, address: object) -> float:
        """Bytes sent to ``address`` per byte received from it, as far as remembered (0 if nothing came)."""
        entry = self._ledger.get(address)
        return entry[1] / entry[0] if entry and entry[0] else 0.0
