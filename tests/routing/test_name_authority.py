"""The policy's estate match is an authority: a new key cannot join as a trusted estate (issue 10.2)."""

from __future__ import annotations

import pytest

from flowcast.house.status import render
from flowcast.transport.keep import RemoteRecord, Status
from tests.routing.kit import World


@pytest.mark.parametrize("acceptance", ["never", "once", "always"])
def test_a_new_key_named_alpha_gets_no_road_into_a_policy_that_trusts_alpha(acceptance):
    """Was a finding: under ``always`` a new key joined as "alpha" and its writes landed as alpha."""
    world = World(seed=61)
    beta = world.routed_estate("beta", ["manor"], policy=[{"allow": "write", "estate": "alpha"}], acceptance=acceptance)
    alpha = world.routed_estate("alpha", ["manor"])
    if acceptance == "never":
        road = alpha.roads["main"]
        beta.keep.add(RemoteRecord("alpha", "estate", 0, road.keys.verkey, road.keys.pubkey, Status.ACCEPTED))
    world.connect(alpha, beta)
    inbox = beta.store("manor").queue("inbox")
    alpha["manor"].send("inbox@.beta", {"from": "alpha"})
    assert world.run_until(lambda: len(inbox.queue) == 1, 5)
    thief = world.estate("alpha", "mallory", policy="always")  # same name, new keys
    attempt = thief.join("beta:main")
    assert world.run_until(lambda: attempt.result is not None, 5)
    assert attempt.result == "refused"
    road = beta.roads["main"]
    assert road.counts["key_changed"] == 1 and road.counts["join_refused"] == 1
    assert road.remote("alpha").fingerprint == alpha.roads["main"].keys.fingerprint
    # nothing the thief sends lands, even knowing beta's keys
    thief.add_remote(RemoteRecord("beta", "estate", 0, road.keys.verkey, road.keys.pubkey, Status.ACCEPTED), "beta:main")
    out = thief.send({"from": "thief"}, "beta", timeout=2.0)
    world.run_until(lambda: out.done, 10)
    assert out.state == "failed" and len(inbox.queue) == 1
    # and the operator sees it in flowcast status
    status = beta["manor"].status()
    assert status["joins"]["main"]["key_changed"] == 1
