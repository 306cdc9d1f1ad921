"""JoinBudget: how much expensive join work a second, and a fair share of it per source.

A cookie (joingate.py) proves that a JOIN's source address receives; it
does not make the JOIN cheap.  A flooder from real addresses answers its
cookies, and every answered JOIN used to cost an Ed25519 verification, a
signed reply and a keep record (about 0.3 ms of the stack's thread, and a
file): 2,000 a second was most of a core, and the echo of an established
session waited behind them.  So, as WireGuard rate-limits handshakes per
source address once they carry a valid cookie, the expensive work is
spent from two token buckets:

* a global one, ``rate`` joins a second (a burst of a quarter second's
  worth): the cap on what joins can cost this stack, whatever comes;
* one per source address, refilled at that source's *fair share*: half
  of ``rate`` divided by the number of sources heard in the last second
  (never more than ``per_source``), a burst of ``burst`` (by default a
  quarter second's worth, at least 5: WireGuard's 20 a second and 5).
  However many ports a steady flood comes from, between them they get half
  the global rate and leave the other half as headroom: a legitimate
  joiner, with its own address and a full bucket, is served at its first
  JOIN instead of losing a lottery against the flood's datagrams (when the
  shares summed to the whole rate, jitter kept the global bucket empty and
  a newcomer's join took 1.5 s under a cookie-answering flood).

Sources are addresses (host and port), not hosts: on loopback and behind
one NAT every estate shares the host.  A flooder with many fresh ports gets
a burst per port, but the global bucket still caps the total; it cannot be
told apart from as many genuine joiners, which then share per JOIN.  The
state is bounded: ``sources`` buckets (the least recently heard is
forgotten) and the sources heard in the last second.
"""

from __future__ import annotations

from flowcast.runtime.tokenbucket import TokenBucket

__all__ = ["JoinBudget"]

_WINDOW = 1.0  # seconds: a source heard within it counts as active


class JoinBudget:
    """Token buckets for the work an admitted JOIN costs (verify, sign, keep record)."""

    def __init__(
        self, rate: float = 100.0, *, per_source: float = 20.0, burst: float | None = None, sources: int = 4096, start: float | None = None
    ) -> None:
        burst = max(5.0, per_source / 4) if burst is None else burst
        if rate <= 0 or per_source <= 0 or burst < 1 or sources < 1:
            raise ValueError("join budget: rate and per_source must be positive, burst at least 1, sources at least 1")
        self.rate = float(rate)
        self.per_source = float(per_source)
        self.burst = float(burst)
        self.sources = sources
        #: What a source heard for the first time may spend at once (None: its whole burst).
        self.start = start
        self._bucket = TokenBucket(self.rate, max(1.0, self.rate / 4))  # counts from the first JOIN
        self._buckets: dict[object, TokenBucket] = {}  # address -> its bucket, least recently heard first
        self._heard: dict[object, float] = {}  # address -> last heard, least recently heard first

    def active(self, now: float) -> int:
        """Sources heard in the last second (this one included once it asked)."""
        heard = self._heard
        horizon = now - _WINDOW
        while heard:
            first = next(iter(heard))
            if heard[first] >= horizon:
                break
            del heard[first]
        return len(heard)

    def take(self, address: object, now: float, cost: float = 1.0) -> bool:
        """May a JOIN from ``address`` be verified and admitted now?  (Spends ``cost`` tokens of each bucket.)

        ``cost`` other than one: the buckets count something else than JOINs
        (replybudget.py counts bytes); ``burst`` must then hold the largest cost.
        """
        heard = self._heard
        heard.pop(address, None)
        heard[address] = now
        if len(heard) > self.sources:
            del heard[next(iter(heard))]
        share = min(self.per_source, self.rate / (2 * max(1, self.active(now))))
        buckets = self._buckets
        mine = buckets.pop(address, None)
        if mine is None:
            mine = TokenBucket(share, self.burst, at=now, tokens=self.start)
        else:
            mine.rate = share  # the share as it is now, since this source was last heard
        if len(buckets) >= self.sources:
            del buckets[next(iter(buckets))]
        buckets[address] = mine
        if mine.refill(now) < cost or self._bucket.refill(now) < cost:
            return False
        mine.tokens -= cost
        self._bucket.tokens -= cost
        return True
