"""A name bound to a key stays bound on the road, under every acceptance (issue 10.2, 10.7)."""

from __future__ import annotations

import os

import pytest

from flowcast.transport import handshake as hs
from flowcast.transport.keep import Keep, RemoteRecord, Status
from flowcast.transport.wire import PacketKind

from .roadkit import World


@pytest.mark.parametrize("policy", ["never", "once", "always"])
def test_a_new_key_joining_as_alpha_cannot_write_as_alpha(policy):
    """Was a finding: under ``always`` a fresh key joined as "alpha" and its writes landed as alpha."""
    world = World(seed=41, delay=0.001)
    main = world.estate("main", policy=policy)
    alpha = world.estate("alpha")
    if policy == "never":  # an operator accepted the real alpha
        main.keep.add(RemoteRecord("alpha", "alpha", 0, alpha.keys.verkey, alpha.keys.pubkey, Status.ACCEPTED))
    first = alpha.join("main")
    assert world.run_until(lambda: first.result == "accepted" and alpha.is_allowed("main"), 10)
    # the thief: its own keep, claiming alpha's name with new keys
    thief = world.estate("thief", keep=_keep_named("alpha"))
    attempt = thief.join("main")
    assert world.run_until(lambda: attempt.result is not None, 10)
    assert attempt.result == "refused" and "pinned" in attempt.reason
    assert main.counts["join_refused"] >= 1
    assert any(note.startswith("key-changed alpha ") for note in main.events)
    assert main.keep.find("alpha").fingerprint == alpha.keys.fingerprint
    # even told main's keys out of band, the thief gets no session and no write lands
    thief.add_remote(RemoteRecord("main", "main", 0, main.keys.verkey, main.keys.pubkey, Status.ACCEPTED), "main")
    forged = thief.send({"from": "thief"}, "main", timeout=2.0)
    world.run_until(lambda: forged.done, 10)
    assert forged.state == "failed"
    # the real alpha still writes as alpha
    real = alpha.send({"from": "alpha"}, "main")
    assert world.run_until(lambda: real.delivered, 5)
    got = [main.receive() for _ in range(2)]
    assert [(m.remote, m.data) for m in got if m is not None] == [("alpha", {"from": "alpha"})]


def _keep_named(name: str) -> Keep:
    keep = Keep(None)
    keep.ensure_local(name)
    return keep


@pytest.mark.parametrize("mode, stamp", [(True, 1.0), (0, float("inf")), (0, float("nan")), (0, -5.0), ("0", 1.0), (1 << 16, 1.0)])
def test_joins_with_non_conforming_fields_are_dropped_and_counted(mode, stamp):
    """Was a finding (issue 10.7): joins with ``mode=True`` or ``stamp=+inf`` were accepted."""
    world = World(seed=42, delay=0.001)
    main = world.estate("main", policy="always")
    mallory = world.net.port("mallory")
    keys = Keep(None).ensure_local("mallory").keys
    mallory.send(hs.build_join(keys, "mallory", "mallory", mode, os.urandom(16), 7, stamp=stamp), "main")
    world.run_for(0.5)
    assert main.counts["bad_join"] == 1 and main.keep.remotes() == [] and main.counts["internal_errors"] == 0
    assert mallory.receive() is None  # a drop: nothing answered
    # a conforming join from the same key still works
    mallory.send(hs.build_join(keys, "mallory", "mallory", 0, os.urandom(16), 8), "main")
    world.run_for(0.5)
    reply = mallory.receive()
    assert reply is not None and reply[0][1] == PacketKind.JOIN_ACCEPT
