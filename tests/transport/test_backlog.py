"""A known estate that is down: what waits for it is bounded in count and bytes.

Without a session, or with one whose remote is dead, a message waits in the
remote's backlog; a full backlog fails the new message at once with reason
``backlog full`` (the router turns that into a routed error), so nothing is
dropped silently and nothing grows without bound until message timeouts.
"""

from __future__ import annotations

from flowcast.transport.keep import RemoteRecord, Status
from flowcast.transport.road import BACKLOG_FULL
from tests.transport.roadkit import World


def test_backlog_of_an_estate_never_reached_stops_at_its_count():
    world = World(seed=501, delay=0.001)
    alpha = world.estate("alpha", backlog_messages=50)
    gamma = world.estate("gamma")  # known, but its port is gone: down
    alpha.add_remote(RemoteRecord("gamma", "gamma", 0, gamma.keys.verkey, gamma.keys.pubkey, Status.ACCEPTED), "gamma")
    gamma.close()
    failed = []
    alpha.hooks.add("done", lambda msg: failed.append(msg) if msg.state == "failed" else None)
    outs = [alpha.send({"n": n}, "gamma", timeout=600.0) for n in range(120)]
    remote = alpha.remote("gamma")
    assert len(remote.backlog) == 50
    assert [o.state for o in outs[:50]] == ["queued"] * 50
    assert all(o.state == "failed" and o.reason == BACKLOG_FULL for o in outs[50:])
    assert failed == outs[50:]  # each refusal reported to whoever watches the stack
    assert alpha.counts["backlog_full"] == 70
    world.run_for(20.0)  # allow attempts come and go; the bound holds
    assert len(remote.backlog) == 50 and alpha.pending() == 50


def test_backlog_stops_at_its_bytes_and_one_large_message_still_fits():
    world = World(seed=502, delay=0.001)
    alpha = world.estate("alpha", backlog_bytes=100_000)
    gamma = world.estate("gamma")
    alpha.add_remote(RemoteRecord("gamma", "gamma", 0, gamma.keys.verkey, gamma.keys.pubkey, Status.ACCEPTED), "gamma")
    gamma.close()
    big = alpha.send_bytes(b"b" * 300_000, "gamma", timeout=600.0)
    assert big.state == "queued"  # alone, a message over the byte bound still waits
    refused = alpha.send_bytes(b"s", "gamma", timeout=600.0)
    assert refused.state == "failed" and refused.reason == BACKLOG_FULL
    world2 = World(seed=503, delay=0.001)
    delta = world2.estate("delta", backlog_bytes=100_000)
    epsilon = world2.estate("epsilon")
    delta.add_remote(RemoteRecord("epsilon", "epsilon", 0, epsilon.keys.verkey, epsilon.keys.pubkey, Status.ACCEPTED), "epsilon")
    epsilon.close()
    outs = [delta.send_bytes(b"x" * 10_000, "epsilon", timeout=600.0) for _ in range(25)]
    assert [o.state for o in outs].count("queued") == 10
    assert all(o.reason == BACKLOG_FULL for o in outs[10:])
    assert delta.remote("epsilon").backlog_bytes == 100_000


def test_dead_remote_with_a_session_backlogs_bounded_then_everything_queued_arrives_in_order():
    world = World(seed=504, delay=0.001)
    alpha, beta = world.pair(backlog_messages=40)
    world.net.partition(["alpha"], ["beta"])
    assert world.run_until(lambda: alpha.remote("beta").presence.value == "dead", 30)
    outs = [alpha.send({"n": n}, "beta", timeout=600.0) for n in range(100)]
    assert len(alpha.remote("beta").backlog) == 40  # not the dead session's link, unbounded
    assert alpha.remote("beta").session.link.pending_count == 0
    assert all(o.reason == BACKLOG_FULL for o in outs[40:])
    world.run_for(10.0)
    assert len(alpha.remote("beta").backlog) == 40
    world.net.heal()
    assert world.run_until(lambda: all(o.delivered for o in outs[:40]), 30)
    got = [m.data["n"] for m in beta.receive_many() if m.remote == "alpha"]
    assert got == list(range(40))  # nothing queued was lost, nothing refused arrived


def test_backlog_expiry_keeps_its_byte_count():
    world = World(seed=505, delay=0.001)
    alpha = world.estate("alpha", backlog_messages=10, backlog_bytes=50_000)
    gamma = world.estate("gamma")
    alpha.add_remote(RemoteRecord("gamma", "gamma", 0, gamma.keys.verkey, gamma.keys.pubkey, Status.ACCEPTED), "gamma")
    gamma.close()
    short = [alpha.send_bytes(b"s" * 10_000, "gamma", timeout=1.0) for _ in range(5)]
    world.run_for(2.0)
    assert all(o.reason.startswith("no session") for o in short)
    assert alpha.remote("gamma").backlog_bytes == 0
    later = [alpha.send_bytes(b"l" * 10_000, "gamma", timeout=600.0) for _ in range(5)]
    assert all(o.state == "queued" for o in later)  # room again once the expired went


def test_a_remote_forgotten_by_the_keep_fails_what_waited_for_it():
    """Was a finding: a remote evicted from a full keep (a join flood) took its backlog
    with it -- messages stayed ``queued`` forever, past their timeouts, and pending() said 0.

    Accepted records are no longer evicted at all (a full keep refuses new keys
    instead), so the flood now leaves alpha and its backlog alone; dropping a
    remote (the path an eviction of a record takes) still fails what waited."""
    import os

    from flowcast.transport import handshake as hs
    from flowcast.transport.crypto import LongTermKeys
    from flowcast.transport.keep import Keep
    from flowcast.transport.road import REMOTE_FORGOTTEN

    world = World(seed=503, delay=0.001)
    beta = world.estate("beta", keep=Keep(None, max_remotes=4), policy="once", join_cookies="never")
    mallory = world.net.port("mallory")
    mallory.on_readable(lambda: mallory.receive_many(1000))
    alpha = LongTermKeys.generate()
    mallory.send(hs.build_join(alpha, "alpha", "alpha", 0, os.urandom(16), 1), "beta")
    world.run_for(0.01)
    assert beta.keep.bound("alpha") is not None  # accepted from the wire, never had a session
    failed = []
    beta.hooks.add("done", lambda msg: failed.append(msg) if msg.state == "failed" else None)
    outs = [beta.send({"n": n}, "alpha", timeout=None) for n in range(3)] + [beta.send({"n": 3}, "alpha", timeout=600.0)]
    assert [o.state for o in outs] == ["queued"] * 4 and beta.pending() == 4
    for n in range(4):  # strangers fill the keep: alpha is accepted, so it is never evicted for them
        mallory.send(hs.build_join(LongTermKeys.generate(), f"junk{n}", f"junk{n}", 0, os.urandom(16), 2 + n), "beta")
        world.run_for(0.01)
    assert beta.keep.bound("alpha") is not None and beta.counts["keep_full"] >= 1
    assert [o.state for o in outs] == ["queued"] * 4 and beta.pending() == 4 and failed == []
    (fp,) = [fp for fp, r in beta.remotes.items() if r.name == "alpha"]
    beta._table.drop(fp)
    assert all(r.name != "alpha" for r in beta.remotes.values())
    assert [(o.state, o.reason) for o in outs] == [("failed", REMOTE_FORGOTTEN)] * 4
    assert failed == outs and beta.pending() == 0
