"""Policy before decoding (issue 25, finding 1), with routers: the road asks the router's policy first.

An estate no rule admits sent an 8 MiB message and the victim's road held
all of it and decoded it before the router refused it (93 to 690 MB RSS).
Now the router tells each road what an estate may send (routing/allowance.py):
an estate no rule admits only short messages (it still hears "denied"),
an estate with a rule, or one owing this house a read's value, any size.
Each test failed before the allowance existed.
"""

from __future__ import annotations

from flowcast.routing.allowance import UNADMITTED_BYTES
from flowcast.routing.policy import Policy
from flowcast.transport.admission import HOLD_SLACK
from tests.routing.kit import World
from tests.routing.test_router import errors_of
from tests.transport.test_hostile_peer_decode import PeakBudget


def _estates(policy):
    world = World(seed=11)
    alpha = world.routed_estate("alpha", ["manor"], policy=policy)
    road = alpha.roads["main"]
    road.hold_budget = PeakBudget(road.hold_budget.limit)  # before any session
    beta = world.routed_estate("beta", ["manor"], policy=[{"allow": "any", "estate": "alpha"}])
    gamma = world.routed_estate("gamma", ["manor"], policy=[{"allow": "any", "estate": "alpha"}])
    world.connect(beta, alpha)
    world.connect(gamma, alpha)
    return world, alpha, beta, gamma


def test_a_big_message_from_an_estate_no_rule_admits_is_never_held_and_an_honest_one_is_served():
    world, alpha, beta, gamma = _estates([{"allow": "write", "estate": "gamma"}])
    alpha.store("manor").share("t")
    alpha.store("manor").queue("q")
    beta.roads["main"].default_timeout = 5.0
    errors = errors_of(beta, "manor")
    beta["manor"].send("t@.alpha", "x" * (8 << 20), src="out")  # the finding's 8 MiB
    honest = [gamma["manor"].send("q@.alpha", {"i": i, "pad": "y" * 100_000}, src="out") for i in range(5)]
    queue = alpha.store("manor").get("q").queue
    assert all(honest) and world.run_until(lambda: len(queue) == 5 and len(errors.queue) == 1, 30)
    road = alpha.roads["main"]
    assert road.hold_budget.peak <= 2 * UNADMITTED_BYTES + HOLD_SLACK + 2 * 200_000  # beta's few pieces, gamma's messages
    assert alpha.store("manor").get("t").fields() == {}
    counts = alpha["manor"].counts
    assert counts["not_admitted"] >= 1 and counts["denied"] == 0  # dropped at the road, not decoded for the router
    assert any(d["kind"] == "not_admitted" and "estate 'beta'" in d["reason"] for d in alpha["manor"].denials)
    assert errors.pop()["data"]["kind"] == "undelivered"  # beta's sender hears its message did not go


def test_an_estate_no_rule_admits_still_hears_why_a_short_message_is_denied():
    world, alpha, beta, gamma = _estates([])
    alpha.store("manor").share("t")
    errors = errors_of(beta, "manor")
    beta["manor"].send("t@.alpha", {"n": 1}, src="out")
    assert world.run_until(lambda: len(errors.queue) == 1, 10)
    assert errors.pop()["data"]["kind"] == "denied"


def test_a_read_answer_of_any_size_passes_from_an_estate_no_rule_admits():
    world, alpha, beta, gamma = _estates([])
    beta.store("manor").share("big", {"v": "z" * 500_000})
    answer = alpha.store("manor").queue("answer")
    alpha["manor"].send("big@.beta", None, src="answer", tag="read")
    assert world.run_until(lambda: len(answer.queue) == 1, 20)
    assert answer.pop()["data"] == {"v": "z" * 500_000}


def test_a_rule_added_at_run_time_lets_big_messages_in():
    world, alpha, beta, gamma = _estates([])
    alpha.store("manor").queue("q")
    alpha["manor"].policy.replace([{"allow": "write", "estate": "beta"}])
    beta["manor"].send("q@.alpha", "x" * 300_000, src="out")
    queue = alpha.store("manor").get("q").queue
    assert world.run_until(lambda: len(queue) == 1, 20)


def test_admits_any_errs_towards_letting_in_and_a_full_deny_shuts_out():
    policy = Policy([{"allow": "read", "estate": "beta", "share": "config"}, {"deny": "any", "estate": "gamma"}, {"allow": "any"}])
    assert policy.admits_any("beta", "estate", "main")
    assert not policy.admits_any("gamma", "estate", "main")
    assert policy.admits_any("delta", "estate", "main")
    assert not Policy([{"allow": "any", "channel": "control"}]).admits_any("beta", "estate", "main")
    assert not Policy([{"allow": "any", "role": "ops"}]).admits_any("beta", "estate", "main")
    version = policy.version
    policy.replace([])
    assert policy.version == version + 1 and not policy.admits_any("delta", "estate", "main")
