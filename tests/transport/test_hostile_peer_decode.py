"""Policy before decoding, decoding bounded per peer (issue 25, finding 1), at the road.

A road with an allowance (transport/admission.py: what the layer above lets
each remote send) holds nothing of a message larger than its sender may
send and decodes nothing before the layer above has judged it: a peer
allowed nothing cannot make it hold a piece, a peer allowed little cannot
make it hold more than a few pieces' worth, and a message sent for the road
to decode (msgpack, JSON) is dropped undecoded.  Every drop is counted and
told to the allowance.  Each test failed before the allowance existed.
"""

from __future__ import annotations

import flowcast.transport.stack as stack_module
from flowcast.transport.admission import ANY_SIZE, HOLD_FLOOR, NOT_ADMITTED, NOT_BYTES, OVER_ALLOWANCE
from flowcast.transport.budget import HoldBudget
from tests.transport.roadkit import World

_INF = float("inf")


class Stub:
    """An allowance as a router gives one: what each estate may send, changed by the test."""

    def __init__(self, sizes: dict[str, int]) -> None:
        self.sizes = dict(sizes)
        self.version = 0
        self.drops: list[tuple[str, int, str]] = []

    def largest(self, estate: str, role: str, now: float) -> tuple[int, float]:
        return self.sizes.get(estate, 0), _INF

    def dropped(self, estate: str, size: int, reason: str) -> None:
        self.drops.append((estate, size, reason))

    def allow(self, estate: str, size: int) -> None:
        self.sizes[estate] = size
        self.version += 1


class PeakBudget(HoldBudget):
    """A hold budget that remembers the most it ever held: what a peer made the road hold, at its worst."""

    __slots__ = ("_used", "peak")

    def __init__(self, limit: int) -> None:
        self.peak = 0
        super().__init__(limit)

    @property
    def used(self) -> int:  # type: ignore[override]
        return self._used

    @used.setter
    def used(self, value: int) -> None:
        self._used = value
        if value > self.peak:
            self.peak = value


def _world(**options):
    world = World(seed=3)
    alpha = world.estate("alpha", **options)
    alpha.hold_budget = PeakBudget(alpha.hold_budget.limit)  # before any session: each link takes it when made
    beta = world.estate("beta", **options)
    gamma = world.estate("gamma", **options)
    for other in (beta, gamma):
        other.join("alpha")
    assert world.run_until(lambda: alpha.is_allowed("beta") and alpha.is_allowed("gamma") and beta.is_allowed("alpha") and gamma.is_allowed("alpha"), 10)
    got: list = []
    alpha.hooks.add("message", got.append)
    return world, alpha, beta, gamma, got


def test_a_peer_allowed_nothing_gets_nothing_held_and_nothing_delivered():
    world, alpha, beta, gamma, got = _world()
    allowance = Stub({"gamma": ANY_SIZE})
    alpha.set_allowance(allowance)
    big = beta.send_bytes(b"x" * (8 << 20), "alpha", timeout=5.0)  # the 8 MiB of the finding
    small = beta.send_bytes(b"hi", "alpha", stream=1)
    assert world.run_until(lambda: big.done and small.done, 30)
    assert alpha.hold_budget.peak <= HOLD_FLOOR  # not one piece of it was held (a SKIP's books at most)
    assert big.failed and not [m for m in got if m.remote == "beta"]
    assert alpha.counts[NOT_ADMITTED] >= 2  # the big one's refused bodies and the small one, dropped whole
    assert {reason for estate, _, reason in allowance.drops if estate == "beta"} == {NOT_ADMITTED}
    assert small.delivered  # acknowledged and dropped: the stream is not left waiting
    # an honest peer beside it is served as before
    honest = gamma.send_bytes(b"y" * 200_000, "alpha")
    assert world.run_until(lambda: honest.delivered, 10)
    assert [len(m.data) for m in got if m.remote == "gamma"] == [200_000]


def test_a_peer_allowed_little_holds_a_few_pieces_at_most_and_its_small_messages_pass():
    world, alpha, beta, gamma, got = _world(datagram_size=1232)
    allowance = Stub({"beta": 4096, "gamma": ANY_SIZE})
    alpha.set_allowance(allowance)
    big = beta.send_bytes(b"x" * (1 << 20), "alpha", timeout=5.0)
    ok = beta.send_bytes(b"z" * 4096, "alpha", stream=1)
    assert world.run_until(lambda: big.done and ok.done, 30)
    assert big.failed and ok.delivered
    assert alpha.hold_budget.peak <= 2 * 4096 + (16 << 10)  # admission.hold_limit: never the megabyte
    assert [len(m.data) for m in got if m.remote == "beta"] == [4096]
    honest = gamma.send_bytes(b"y" * (1 << 20), "alpha")
    assert world.run_until(lambda: honest.delivered, 30)


def test_a_whole_message_over_the_allowance_is_dropped_undecoded():
    world, alpha, beta, gamma, got = _world()
    allowance = Stub({"beta": 1000})
    alpha.set_allowance(allowance)
    sent = beta.send_bytes(b"x" * 5000, "alpha")  # one datagram: never held, refused at delivery
    assert world.run_until(lambda: sent.done, 10)
    assert not got and alpha.counts[OVER_ALLOWANCE] == 1 and allowance.drops == [("beta", 5000, OVER_ALLOWANCE)]


def test_messages_for_the_road_to_decode_are_dropped_before_decoding(monkeypatch):
    world, alpha, beta, gamma, got = _world()
    alpha.set_allowance(Stub({"beta": ANY_SIZE}))
    decoded: list = []
    real = stack_module.unpack_untrusted
    monkeypatch.setattr(stack_module, "unpack_untrusted", lambda data, **kw: decoded.append(len(data)) or real(data, **kw))
    packed = beta.send([{} for _ in range(100_000)], "alpha")  # the ~72x msgpack bomb: 100 KB, ~7 MB decoded
    as_json = beta.send({"a": 1}, "alpha", codec="json")
    raw = beta.send_bytes(b"parcel", "alpha")
    assert world.run_until(lambda: packed.done and as_json.done and raw.done, 10)
    assert decoded == [] and [m.data for m in got] == [b"parcel"]
    assert alpha.counts[NOT_BYTES] == 2


def test_a_changed_allowance_is_asked_again_before_the_next_datagram():
    world, alpha, beta, gamma, got = _world()
    allowance = Stub({})
    alpha.set_allowance(allowance)
    first = beta.send_bytes(b"a" * 300, "alpha")
    assert world.run_until(lambda: first.done, 10) and not got
    allowance.allow("beta", 1000)
    second = beta.send_bytes(b"b" * 300, "alpha")
    assert world.run_until(lambda: second.done, 10)
    assert [m.data for m in got] == [b"b" * 300]
    alpha.set_allowance(None)  # none: whatever max_message lets in, decoded as before
    third = beta.send({"n": 3}, "alpha")
    assert world.run_until(lambda: third.done, 10)
    assert got[-1].data == {"n": 3}
