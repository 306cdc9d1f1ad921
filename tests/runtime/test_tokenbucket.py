"""TokenBucket: refill, cap, burst and a clock that runs backwards, on a virtual clock."""

from __future__ import annotations

import pytest

from flowcast.runtime import TokenBucket, VirtualClock


def drain(bucket: TokenBucket, now: float) -> int:
    """How many single tokens can be taken at ``now`` (bounded)."""
    taken = 0
    while taken < 10_000 and bucket.take(now):
        taken += 1
    return taken


def test_starts_full_and_the_burst_is_the_capacity() -> None:
    clock = VirtualClock()
    bucket = TokenBucket(10.0, 4.0, at=clock.now())
    assert drain(bucket, clock.now()) == 4
    assert not bucket.take(clock.now())


def test_refills_at_its_rate() -> None:
    clock = VirtualClock()
    bucket = TokenBucket(10.0, at=clock.now())
    assert drain(bucket, clock.now()) == 10
    clock.advance_to(0.25)
    assert drain(bucket, clock.now()) == 2  # 2.5 accrued: two whole tokens, half of one left
    clock.advance_to(0.375)
    assert drain(bucket, clock.now()) == 1  # the half and 0.125 s more: 1.75, one whole token


def test_never_holds_more_than_its_capacity() -> None:
    clock = VirtualClock()
    bucket = TokenBucket(100.0, 5.0, tokens=0.0, at=clock.now())
    clock.advance_to(3600.0)
    assert bucket.refill(clock.now()) == 5.0
    assert drain(bucket, clock.now()) == 5


def test_a_clock_going_backwards_takes_nothing_and_is_not_credited_twice() -> None:
    bucket = TokenBucket(10.0, tokens=0.0, at=100.0)
    assert bucket.refill(101.0) == 10.0
    assert drain(bucket, 101.0) == 10
    # Back by 50 s: the hand-written refills subtracted 500 tokens here.
    assert bucket.refill(51.0) == 0.0
    assert bucket.at == 101.0
    # Forward to 101.2: only the 0.2 s past the latest time seen count.
    assert drain(bucket, 101.2) == 2


def test_the_first_refill_starts_the_count_when_at_is_unknown() -> None:
    bucket = TokenBucket(2.0, tokens=0.0)
    assert not bucket.take(1000.0)  # no credit for the time before the bucket was first used
    assert bucket.take(1000.5)


def test_take_spends_nothing_when_short() -> None:
    bucket = TokenBucket(1.0, 3.0, tokens=2.5, at=0.0)
    assert not bucket.take(0.0, 3.0)
    assert bucket.tokens == 2.5
    assert bucket.take(0.5, 3.0)
    assert bucket.tokens == 0.0


def test_a_changed_rate_applies_from_the_last_refill() -> None:
    bucket = TokenBucket(10.0, tokens=0.0, at=0.0)
    bucket.refill(1.0)  # 10 at the old rate
    bucket.rate = 1.0
    drain(bucket, 1.0)
    assert bucket.refill(3.0) == 2.0


@pytest.mark.parametrize("args", [(-1.0,), (1.0, -2.0), (float("nan"),), (float("inf"),), (1.0, float("nan"))])
def test_negative_or_non_finite_rate_or_capacity_is_refused(args: tuple) -> None:
    """NaN passed ``rate < 0`` and then never limited (found in review)."""
    with pytest.raises(ValueError, match="token bucket"):
        TokenBucket(*args)


@pytest.mark.parametrize("cost", [-1.0, float("nan")])
def test_a_negative_or_nan_cost_is_refused_and_fills_nothing(cost: float) -> None:
    """A negative cost pushed the tokens past the capacity (found in review)."""
    bucket = TokenBucket(5.0, at=0.0)
    with pytest.raises(ValueError, match="cost"):
        bucket.take(0.0, cost)
    assert bucket.tokens == 5.0
