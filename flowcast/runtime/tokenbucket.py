"""TokenBucket: a rate with a burst, refilled from whatever clock the caller reads.

Four places hand-wrote this refill (the road's handshake buckets, the join
gate, the join budget, the router's log limiter), each with its own answer
to the clock going backwards -- which, written as ``tokens + (now - at) *
rate``, was to take tokens away.  One class gives one answer.

The bucket reads no clock itself: every call passes ``now``, so a bucket
driven by a scheduler's virtual clock is as deterministic as the rest of a
simulated run.
"""

from __future__ import annotations

import math

__all__ = ["TokenBucket"]


class TokenBucket:
    """``rate`` tokens a second, at most ``capacity`` held (the burst).

    It starts full unless ``tokens`` says otherwise.  ``at`` is when it was
    last refilled; None means the first call starts the count (for owners
    that do not know the clock's origin when they are made).  Time that runs
    backwards refills nothing and takes nothing, and the bucket keeps its
    latest ``at``, so the interval is not credited twice when the clock
    catches up.  ``rate`` may change between calls (a fair share that
    depends on how many share it): the new rate applies from the last refill.
    """

    __slots__ = ("rate", "capacity", "tokens", "at")

    def __init__(self, rate: float, capacity: float | None = None, *, tokens: float | None = None, at: float | None = None) -> None:
        if not 0 <= rate < math.inf:  # also refuses NaN, which would never limit
            raise ValueError(f"token bucket: rate must be finite and not negative, not {rate!r}")
        self.rate = float(rate)
        self.capacity = self.rate if capacity is None else float(capacity)
        if not 0 <= self.capacity < math.inf:
            raise ValueError(f"token bucket: capacity must be finite and not negative, not {capacity!r}")
        self.tokens = self.capacity if tokens is None else min(float(tokens), self.capacity)
        self.at = at

    def refill(self, now: float) -> float:
        """Add what accrued since the last refill (up to the capacity); the tokens now held."""
        at = self.at
        if at is None or now <= at:
            if at is None:
                self.at = now
            return self.tokens
        tokens = self.tokens + (now - at) * self.rate
        capacity = self.capacity
        self.tokens = tokens if tokens < capacity else capacity
        self.at = now
        return self.tokens

    def take(self, now: float, cost: float = 1.0) -> bool:
        """Spend ``cost`` tokens if the bucket holds them now; False (nothing spent) if not.

        A capacity below ``cost`` never grants it: size the bucket for the cost.
        """
        if not 0 <= cost < math.inf:  # a negative cost would fill the bucket past its capacity
            raise ValueError(f"token bucket: cost must be finite and not negative, not {cost!r}")
        if self.refill(now) < cost:
            return False
        self.tokens -= cost
        return True

    def __repr__(self) -> str:
        return f"<TokenBucket {self.tokens:.3g}/{self.capacity:.3g} at {self.rate:.3g}/s>"
