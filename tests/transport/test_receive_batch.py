"""A batch of datagrams read at once (roadreceive.py): after the first of a session settles it at an
address, the rest only open and go to the link -- and each of them is still judged alone."""

from __future__ import annotations

from flowcast.transport.road import RoadStack
from flowcast.transport.wire import PacketKind

from .roadkit import World


def _capture(world: World, source: str, destination: str) -> list[bytes]:
    seen: list[bytes] = []
    original = world.net._send

    def tapped(data, src, dst):
        if src == source and dst == destination and data[1] == PacketKind.SEALED:
            seen.append(bytes(data))
        original(data, src, dst)

    world.net._send = tapped
    return seen


def test_replays_forgeries_and_another_address_in_one_batch_are_each_judged_alone(monkeypatch):
    world = World(seed=21, delay=0.001)
    alpha, beta = world.pair()
    seen = _capture(world, "alpha", "beta")
    world.net.link("alpha", "beta", both=False, loss=1.0)  # alpha's datagrams are captured, not delivered
    for n in range(3):
        alpha.send_bytes(b"m%d" % n, "beta")
        world.run_for(0.0005)  # one datagram each
    carrying = [d for d in seen if len(d) > 16 + 16 + 4]
    assert len(carrying) >= 3
    first, second, third = carrying[:3]
    forged = bytearray(second)
    forged[-1] ^= 1
    slow = []
    authentic = RoadStack._authentic

    def counted(self, *args):
        slow.append(args[3])  # the counter
        return authentic(self, *args)

    monkeypatch.setattr(RoadStack, "_authentic", counted)
    before = dict(beta.counts)
    mallory = world.net.port("mallory")
    batch = [(first, "alpha"), (first, "alpha"), (bytes(forged), "alpha"), (second, "alpha"), (third, "mallory")]
    beta._receive_batch(batch, world.scheduler.clock.now())
    assert beta.counts["replayed"] - before.get("replayed", 0) == 1
    assert beta.counts["unauthentic"] - before.get("unauthentic", 0) == 1
    assert beta.counts["internal_errors"] == before.get("internal_errors", 0)
    assert [m.data for m in beta.receive_many()] == [b"m0", b"m1", b"m2"]
    assert len(slow) == 2  # the first of the run, and the one from another address
    assert beta.counts["path_challenges"] - before.get("path_challenges", 0) == 1  # mallory's copy proves nothing
    assert beta.remote("alpha").address == "alpha"
    del mallory


def test_a_session_that_ends_mid_batch_takes_no_more_of_it():
    """A message listener may end the session (here as an operator's rejection does): the rest of the
    batch must not reach its link through the quick path."""
    world = World(seed=22, delay=0.001)
    alpha, beta = world.pair()
    seen = _capture(world, "alpha", "beta")
    world.net.link("alpha", "beta", both=False, loss=1.0)
    for n in range(3):
        alpha.send_bytes(b"x%d" % n, "beta")
        world.run_for(0.0005)
    carrying = [d for d in seen if len(d) > 16 + 16 + 4][:3]
    assert len(carrying) == 3
    heard = []

    def forget(message):
        heard.append(message.data)
        beta._joins.retire(beta.remote("alpha").fingerprint)  # what revoke.py does to a rejected key

    beta.hooks.add("message", forget)
    before = beta.counts["unknown_session"]
    beta._receive_batch([(d, "alpha") for d in carrying], world.scheduler.clock.now())
    assert heard == [b"x0"]
    assert beta.counts["unknown_session"] - before == 2
