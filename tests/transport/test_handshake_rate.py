"""HandshakeRate: the road's buckets for public-key work, on a virtual clock (roadrate.py)."""

from __future__ import annotations

from collections import Counter

from flowcast.runtime import VirtualClock
from flowcast.transport.roadrate import SOURCES, HandshakeRate


def afforded(rate: HandshakeRate, address: object, now: float, tries: int) -> int:
    return sum(rate.afford(now, address) for _ in range(tries))


def test_one_source_gets_a_tenth_of_the_rate_and_refills() -> None:
    clock = VirtualClock()
    counts: Counter[str] = Counter()
    rate = HandshakeRate(100.0, clock.now(), {}, counts)
    assert afforded(rate, "flooder", clock.now(), 50) == 10
    assert counts["rate_limited"] == 40
    clock.advance_to(0.5)  # five more of its share
    assert afforded(rate, "flooder", clock.now(), 50) == 5
    assert afforded(rate, "other", clock.now(), 1) == 1  # its neighbour still has its own


def test_many_sources_are_held_to_the_stack_rate_but_known_places_keep_their_share() -> None:
    counts: Counter[str] = Counter()
    places = {"known": 1}
    rate = HandshakeRate(20.0, 0.0, places, counts)
    granted = sum(rate.afford(0.0, f"stranger{n}") for n in range(100))
    assert granted == 20  # the stack's bucket, not 100 sources x 2
    assert rate.low
    assert rate.afford(0.0, "known")  # the stack's bucket is empty; a remote's address is not locked out
    assert not rate.afford(0.0, "stranger999")


def test_the_sources_remembered_are_bounded() -> None:
    rate = HandshakeRate(1e9, 0.0, {}, Counter())
    for n in range(SOURCES + 100):
        rate.afford(0.0, n)
    assert len(rate._per_source) == SOURCES


def test_a_rate_below_ten_still_grants_each_source_one_at_a_time() -> None:
    """A per-source share under one token never granted one: handshake_rate < 10 locked everyone out (found in review)."""
    from collections import Counter

    rate = HandshakeRate(2.0, 0.0, {}, Counter())
    assert rate.afford(0.0, ("127.0.0.1", 1))
    assert not rate.afford(0.0, ("127.0.0.1", 1))
    assert rate.afford(5.0, ("127.0.0.1", 1))
