"""A manor passes a share on to another house of its estate (Router.forward), its tags checked as declared (Router.declare)."""

from __future__ import annotations

import pytest

from flowcast.routing.policy import declare_access
from tests.routing.kit import World

SUBSCRIBE = declare_access("subscribe")


def _estates(policy):
    world = World(seed=5)
    alpha = world.routed_estate("alpha", ["manor", "w1"], policy=[{"allow": "any", "estate": "beta"}])
    beta = world.routed_estate("beta", ["manor", "w1"], policy=policy)
    world.connect(alpha, beta)
    return world, alpha, beta


def test_a_forwarded_share_is_answered_from_its_house_with_the_message_as_it_came():
    world, alpha, beta = _estates([{"allow": "subscribe", "estate": "alpha", "share": "svc"}])
    seen = []

    def serve(landing):
        seen.append(landing)
        landing.reply({"ok": landing.data["n"]}, tag="served")

    beta["w1"].handle("serve", serve, access=SUBSCRIBE)
    beta.store("w1").share("svc")
    beta["manor"].declare("serve", access=SUBSCRIBE)  # the manor has no handler, only the permission it needs
    beta["manor"].forward("svc", "w1")
    answers, errors = alpha.store("w1").queue("answers"), alpha.store("w1").queue("answers.error")
    assert alpha["w1"].send("svc@.beta", {"n": 3}, src="answers", tag="serve", ext={"id": b"m1"})
    assert world.run_until(lambda: len(answers.queue) == 1, 5)
    (landing,) = seen
    assert tuple(landing.src) == ("answers", "w1", "alpha", "main") and tuple(landing.dst) == ("svc", "w1", "beta", "main")
    assert landing.ext == {"id": b"m1"}
    (answer,) = answers.drain()
    assert answer["tag"] == "served" and answer["data"] == {"ok": 3}
    assert tuple(answer["route"]["src"])[:3] == ("svc", "w1", "beta")
    assert beta["manor"].counts["forwarded"] == 1
    # a tag the manor knows nothing of is a write: this policy does not grant it, forwarded or not
    assert alpha["w1"].send("svc@.beta", {"n": 4}, src="answers", tag="other")
    assert world.run_until(lambda: len(errors.queue) == 1, 5)
    assert errors.drain()[0]["data"]["kind"] == "denied" and beta["manor"].counts["forwarded"] == 1
    beta["manor"].unforward("svc")
    beta["manor"].unhandle("serve")
    assert alpha["w1"].send("svc@.beta", {"n": 5}, src="answers", tag="serve")
    assert world.run_until(lambda: len(errors.queue) == 1, 5)
    assert errors.drain()[0]["data"]["kind"] == "denied" and len(seen) == 1 and not answers.queue


def test_forward_and_declare_refuse_what_cannot_work():
    _world, _alpha, beta = _estates([])
    with pytest.raises(ValueError, match="only the manor"):
        beta["w1"].forward("svc", "manor")
    with pytest.raises(ValueError, match="another yard"):
        beta["manor"].forward("svc", "manor")
    with pytest.raises(ValueError, match="reply"):
        beta["manor"].declare("x", access="reply")
    beta["manor"].declare("x", access=SUBSCRIBE)
    with pytest.raises(ValueError, match="already"):
        beta["manor"].declare("x", access="write")
