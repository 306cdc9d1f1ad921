"""RoadStack over the simulated network: join, allow, messages, presence."""

from __future__ import annotations

import pytest

from flowcast.transport.keep import Keep, Status
from flowcast.transport.presence import Presence

from .roadkit import World


def test_join_then_allow_makes_one_session_each_way():
    world = World(seed=1, delay=0.001)
    alpha = world.estate("alpha")
    beta = world.estate("beta")
    attempt = alpha.join("beta")
    assert world.run_until(lambda: alpha.is_allowed("beta") and beta.is_allowed("alpha"), 5)
    assert attempt.result == "accepted"
    a_session = alpha.remote("beta").session
    b_session = beta.remote("alpha").session
    assert a_session.tx_key == b_session.rx_key and a_session.rx_key == b_session.tx_key
    assert a_session.tx_key != a_session.rx_key
    assert a_session.remote_index == b_session.local_index and b_session.remote_index == a_session.local_index
    assert alpha.presence("beta") is Presence.ALIVE and beta.presence("alpha") is Presence.ALIVE


def test_messages_both_ways_msgpack_and_json_and_bytes():
    world = World(seed=2, delay=0.001)
    alpha, beta = world.pair()
    sent = [alpha.send({"n": i, "text": "x" * i}, "beta") for i in range(50)]
    j = alpha.send({"json": [1, 2, 3]}, "beta", codec="json")
    raw = alpha.send_bytes(b"\x00\x01raw", "beta", stream=7)
    back = beta.send({"reply": True}, "alpha")
    assert world.run_until(lambda: all(m.delivered for m in sent + [j, raw, back]), 5)
    got = beta.receive_many()
    assert [m.data for m in got if m.stream == 0] == [{"n": i, "text": "x" * i} for i in range(50)] + [{"json": [1, 2, 3]}]
    assert [m.data for m in got if m.stream == 7] == [b"\x00\x01raw"]
    assert all(m.remote == "alpha" for m in got)
    assert alpha.receive().data == {"reply": True}


def test_segmented_message_of_64_mib_arrives_whole():
    world = World(seed=3, delay=0.001, loss=0.02)
    alpha, beta = world.pair()
    payload = bytes(range(256)) * (256 * 1024)  # 64 MiB
    out = alpha.send_bytes(payload, "beta", timeout=None)
    assert world.run_until(lambda: out.delivered, 120, step=0.5)
    message = beta.receive()
    assert message is not None and message.data == payload


def test_fire_and_forget_is_sent_once_and_never_resent():
    world = World(seed=4, delay=0.001)
    alpha, beta = world.pair()
    world.net.link("alpha", "beta", both=False, loss=1.0)
    out = alpha.send({"x": 1}, "beta", reliable=False)
    world.run_for(2.0)
    assert out.state == "sent"
    assert beta.receive() is None
    assert alpha.remote("beta").session.link.counts["resent"] == 0


def test_reliable_message_times_out_when_peer_unreachable_and_stream_moves_on():
    world = World(seed=5, delay=0.001)
    alpha, beta = world.pair()
    world.net.link("alpha", "beta", both=False, loss=1.0)
    doomed = alpha.send({"lost": True}, "beta", timeout=0.5)
    world.run_until(lambda: doomed.done, 5)
    assert doomed.state == "failed" and doomed.reason == "timeout"
    world.net.link("alpha", "beta", both=False, loss=0.0)
    later = alpha.send({"after": True}, "beta")
    assert world.run_until(lambda: later.delivered, 20)
    assert [m.data for m in beta.receive_many()] == [{"after": True}]


def test_retries_bound_a_message():
    world = World(seed=6, delay=0.001)
    alpha, beta = world.pair()
    world.net.link("alpha", "beta", both=False, loss=1.0)
    doomed = alpha.send({"lost": True}, "beta", timeout=None, retries=2)
    assert world.run_until(lambda: doomed.done, 30)
    assert doomed.state == "failed" and doomed.reason == "retries exhausted"


def test_presence_goes_dead_and_back_with_notifications():
    world = World(seed=7, delay=0.001)
    alpha, beta = world.pair(alive_interval=0.5, dead_after=1.5)
    changes = []
    alpha.hooks.add("presence", lambda name, old, new: changes.append((name, new)))
    world.net.partition(["alpha"], ["beta"])
    assert world.run_until(lambda: alpha.presence("beta") is Presence.DEAD, 5)
    world.net.heal()
    assert world.run_until(lambda: alpha.presence("beta") is Presence.ALIVE, 5)
    assert changes == [("beta", Presence.DEAD), ("beta", Presence.ALIVE)]


def test_idle_stacks_only_heartbeat():
    world = World(seed=8, delay=0.001)
    alpha, beta = world.pair(alive_interval=1.0)
    before = world.net.counts["sent"]
    switches = world.scheduler.switches
    world.run_for(10.0)
    sent = world.net.counts["sent"] - before
    # one ping and one ack per interval and direction at most
    assert 0 < sent <= 4 * 11
    # readiness- and timer-driven: a few wake-ups per datagram, no polling loop
    # (a 1 ms poll alone would be 10,000 switches per stack here)
    assert world.scheduler.switches - switches <= 6 * sent


def test_simultaneous_allow_resolves_to_one_session():
    world = World(seed=9, delay=0.002)
    alpha = world.estate("alpha")
    beta = world.estate("beta")
    alpha.join("beta")
    assert world.run_until(lambda: alpha.is_allowed("beta") and beta.is_allowed("alpha"), 5)
    for _ in range(5):
        alpha.allow("beta")
        beta.allow("alpha")
        assert world.run_until(
            lambda: alpha.remote("beta").allowing is None and beta.remote("alpha").allowing is None, 10
        )
        a, b = alpha.remote("beta").session, beta.remote("alpha").session
        assert a.tx_key == b.rx_key and a.remote_index == b.local_index
    out = alpha.send({"ok": 1}, "beta")
    assert world.run_until(lambda: out.delivered, 5)


def test_policy_never_leaves_join_pending_until_operator_accepts():
    world = World(seed=10, delay=0.001)
    main_keep = Keep(None)
    main = world.estate("main", keep=main_keep, policy="never")
    other = world.estate("other")
    attempt = other.join("main")
    world.run_for(1.0)
    assert attempt.result == "pending"
    assert not main.is_allowed("other")
    record = [r for r in main_keep.remotes() if r.name == "other"][0]
    assert record.status is Status.PENDING
    main_keep.set_status(record.fingerprint, Status.ACCEPTED)
    main.add_remote(record)
    assert world.run_until(lambda: attempt.result == "accepted" and other.is_allowed("main"), 10)
    out = other.send({"hi": 1}, "main")
    assert world.run_until(lambda: out.delivered, 5)


def test_send_to_unknown_remote_raises_key_error():
    world = World(seed=11)
    alpha = world.estate("alpha")
    with pytest.raises(KeyError):
        alpha.send({"x": 1}, "nobody")


def test_message_to_a_remote_without_a_session_fails_at_its_deadline():
    from flowcast.transport.crypto import LongTermKeys
    from flowcast.transport.keep import RemoteRecord

    world = World(seed=12)
    alpha = world.estate("alpha")
    keys = LongTermKeys.generate()
    alpha.add_remote(RemoteRecord("ghost", "ghost", 0, keys.verkey, keys.pubkey, Status.ACCEPTED))  # no address
    out = alpha.send({"x": 1}, "ghost", timeout=2.0)
    assert world.run_until(lambda: out.done, 10)
    assert out.state == "failed" and "no session" in out.reason


def test_handshake_floods_are_rate_limited_and_sessions_unharmed():
    from flowcast.transport import handshake as hs

    world = World(seed=13, delay=0.001)
    alpha, beta = world.pair(handshake_rate=100.0)
    mallory = world.net.port("mallory")
    for i in range(1000):
        mallory.send(hs.build_hello(hs.ShortTerm(), beta.keys.pubkey, i + 1), "beta")
    world.run_for(0.5)
    assert beta.counts["rate_limited"] >= 800
    out = alpha.send({"still": "fine"}, "beta")
    assert world.run_until(lambda: out.delivered, 5)


def test_a_remote_that_moves_is_followed_after_path_validation():
    world = World(seed=14, delay=0.001)
    alpha, beta = world.pair()
    # alpha's address changes (a NAT rebinding, a new interface): same stack, new port
    moved = world.net.port("alpha-moved")
    old = alpha.port
    alpha.port = moved
    moved.on_readable(alpha._event.set)
    old.close()
    out = alpha.send({"from": "new address"}, "beta")
    assert world.run_until(lambda: out.delivered, 10)
    assert world.run_until(lambda: beta.remote("alpha").address == "alpha-moved", 5)
    assert beta.counts["path_challenges"] >= 1 and beta.counts["path_validated"] == 1
    back = beta.send({"to": "new address"}, "alpha")
    assert world.run_until(lambda: back.delivered, 10)
    assert alpha.receive().data == {"to": "new address"}
