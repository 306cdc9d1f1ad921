"""Issue 25, finding 5: a read costs its share's packing once per change, returns at most
``max_reply`` bytes, and one estate's reads are limited in reads and bytes a second.

Before: every read packed the whole share again and sent it, whatever its size and however often
asked -- five reads of an 8 MiB share sent 40 MB, a read every 20 ms took the house down.
"""

from __future__ import annotations

import msgpack
import pytest

import flowcast.routing.reads as reads_module
from flowcast.routing.reads import MAX_REPLY, REFUSALS_ANSWERED, ReadLimits, Reads, configure_reads
from flowcast.routing.route import Route
from flowcast.store import Store
from tests.routing.kit import World
from tests.routing.test_router import errors_of


@pytest.fixture
def world():
    return World(seed=52)


def _estates(world, limits: ReadLimits | None = None, *, others: tuple[str, ...] = ()):
    """beta lets alpha (and ``others``) read; alpha (and they) let nothing in but answers."""
    readers = ("alpha", *others)
    beta = world.routed_estate("beta", ["manor"], policy=[{"allow": "read", "estate": name} for name in readers])
    if limits is not None:
        configure_reads(beta["manor"], limits)
    found = []
    for name in readers:
        estate = world.routed_estate(name, ["manor"], policy=[])
        world.connect(estate, beta)
        found.append(estate)
    return beta, found


def _read(estate, times: int, share: str = "state") -> None:
    for _ in range(times):
        estate["manor"].send(f"{share}@.beta", None, src="answer", tag="read")


def test_reads_of_an_unchanged_share_pack_it_once(world, monkeypatch):
    packed: list[int] = []

    class CountingPacker(msgpack.Packer):
        def pack(self, obj):  # noqa: ANN001, ANN201 - msgpack's own signature
            data = super().pack(obj)
            packed.append(len(data))
            return data

    monkeypatch.setattr(reads_module.msgpack, "Packer", CountingPacker)
    beta, (alpha,) = _estates(world, ReadLimits())
    state = beta.store("manor").share("state")
    state.update(blob=b"s" * 100_000)
    answer = alpha.store("manor").queue("answer")
    _read(alpha, 5)
    assert world.run_until(lambda: len(answer.queue) == 5, 20)
    big = lambda: [n for n in packed if n > 100_000]  # noqa: E731 - every Packer made now counts; the share's is the big one
    assert len(big()) == 1
    assert all(item["data"] == {"blob": b"s" * 100_000} for item in answer.drain())
    state.update(blob=b"t" * 10)  # a change: packed anew, and the new value is what is read
    _read(alpha, 2)
    assert world.run_until(lambda: len(answer.queue) == 2, 20)
    assert len(big()) == 1 and [item["data"] for item in answer.drain()] == [{"blob": b"t" * 10}] * 2
    assert beta["manor"].counts["reads"] == 7


def test_a_share_bigger_than_one_reply_is_refused_with_both_sizes_and_nothing_sent(world):
    beta, (alpha,) = _estates(world)
    fields = {"blob": b"x" * (MAX_REPLY + 1)}
    beta.store("manor").share("state").update(fields)
    answer = alpha.store("manor").queue("answer")
    errors = errors_of(alpha, "manor", "answer")
    sent_before = world.net.counts["sent"]
    _read(alpha, 3)
    assert world.run_until(lambda: len(errors.queue) == 3, 20)
    report = errors.pop()["data"]
    assert report["kind"] == "read_too_large"
    assert f"{len(msgpack.packb(fields))} bytes packed, more than the {MAX_REPLY} bytes" in report["reason"]
    assert not answer.queue and beta["manor"].counts["read_too_large"] == 3 and not beta["manor"].counts["reads"]
    # Three reads and three short reports, with their acks: a 1 MiB answer alone is 17 datagrams or more.
    assert world.net.counts["sent"] - sent_before < 17


def test_reads_over_an_estates_rate_are_refused_and_counted_and_answered_within_a_rate(world):
    beta, (alpha,) = _estates(world, ReadLimits(reads_per_second=5))
    beta.store("manor").share("state").update(n=1)
    answer = alpha.store("manor").queue("answer")
    errors = errors_of(alpha, "manor", "answer")
    router = beta["manor"]
    _read(alpha, 60)
    assert world.run_until(lambda: router.counts["reads"] + router.counts["read_limited"] == 60, 20)
    assert router.counts["reads"] <= 6 and router.counts["read_limited"] >= 54  # a second's burst, and what refilled meanwhile
    assert world.run_until(lambda: len(answer.queue) == router.counts["reads"], 20)
    world.run_for(1)
    # Refusals answered at most REFUSALS_ANSWERED a second; the rest counted, not sent.
    assert len(errors.queue) <= REFUSALS_ANSWERED + 2
    assert all(item["data"]["kind"] == "read_limited" for item in errors.queue)
    assert router.counts["errors_withheld"] == router.counts["read_limited"] - len(errors.queue)
    assert router.status()["counts"]["read_limited"] == router.counts["read_limited"]
    answer.drain()
    world.run_for(2)  # the bucket refills: reads are answered again
    _read(alpha, 3)
    assert world.run_until(lambda: len(answer.queue) == 3, 20)


def test_reply_bytes_an_estate_draws_are_limited_too(world):
    beta, (alpha,) = _estates(world, ReadLimits(max_reply=200_000, bytes_per_second=250_000, reads_per_second=100))
    beta.store("manor").share("state").update(blob=b"b" * 100_000)
    answer = alpha.store("manor").queue("answer")
    router = beta["manor"]
    _read(alpha, 6)
    assert world.run_until(lambda: router.counts["reads"] + router.counts["read_limited"] == 6, 20)
    assert router.counts["reads"] == 2 and router.counts["read_limited"] == 4  # 250,000 bytes hold two replies
    assert 200_000 < router.counts["read_bytes"] <= 250_000
    assert world.run_until(lambda: len(answer.queue) == 2, 20)


def test_one_estates_flood_leaves_another_estates_reads_alone(world):
    beta, (alpha, gamma) = _estates(world, ReadLimits(reads_per_second=5), others=("gamma",))
    beta.store("manor").share("state").update(n=1)
    honest = alpha.store("manor").queue("answer")
    _read(gamma, 200)
    _read(alpha, 4)
    assert world.run_until(lambda: len(honest.queue) == 4, 20)
    assert beta["manor"].counts["read_limited"] >= 190


def test_this_estates_own_yards_are_not_rate_limited():
    world = World(seed=53)
    alpha = world.routed_estate("alpha", ["manor", "w1"], policy=[])
    configure_reads(alpha["manor"], ReadLimits(reads_per_second=2))
    alpha.store("manor").share("state").update(n=1)
    answer = alpha.store("w1").queue("answer")
    for _ in range(20):
        alpha["w1"].send("state@manor.alpha", None, src="answer", tag="read")
    assert world.run_until(lambda: len(answer.queue) == 20, 20)
    assert not alpha["manor"].counts["read_limited"]


# -- the handler on its own ---------------------------------------------------------


class _Router:
    def __init__(self) -> None:
        from collections import Counter

        self.estate = "beta"
        self.counts: Counter[str] = Counter()
        self.at = 0.0

    def now(self) -> float:
        return self.at


class _Pair:
    def __init__(self, estate: str) -> None:
        self.src = Route("answer", "manor", estate, "main")
        self.dst = Route("state", "manor", "beta", "main")


class _Landing:
    def __init__(self, router: _Router, share, estate: str) -> None:
        self.router, self.share, self.pair = router, share, _Pair(estate)
        self.replies: list[bytes] = []

    @property
    def src(self) -> Route:
        return self.pair.src

    @property
    def dst(self) -> Route:
        return self.pair.dst

    def reply(self, data, *, packed=None) -> bool:  # noqa: ANN001
        self.replies.append(packed)
        return True


def test_the_estates_with_buckets_are_bounded(monkeypatch):
    monkeypatch.setattr(reads_module, "MAX_READERS", 4)
    router, reads = _Router(), Reads()
    share = Store().share("state", {"n": 1})
    for i in range(10):
        landing = _Landing(router, share, f"e{i}")
        reads.answer(landing)
        assert landing.replies == [msgpack.packb({"n": 1})]
    assert router.counts["readers_evicted"] == 6 and router.counts["reads"] == 10


def test_read_limits_are_whole_numbers_of_at_least_one():
    for bad in ({"max_reply": 0}, {"bytes_per_second": -1}, {"reads_per_second": 1.5}):
        with pytest.raises(ValueError, match="read limit"):
            ReadLimits(**bad)
