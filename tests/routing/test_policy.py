from __future__ import annotations

import pytest

from flowcast.routing import Policy, PolicyError, Rule


def test_default_deny_and_first_match_wins():
    policy = Policy(
        [
            {"deny": "write", "estate": "beta", "share": "secret.*"},
            {"allow": "write", "estate": "beta", "share": "*"},
            {"allow": "read", "role": "monitor"},
        ]
    )
    assert not policy.allows("write", "beta", "estate", "secret.key", "", "main")
    assert policy.allows("write", "beta", "estate", "ping", "", "main")
    assert not policy.allows("read", "beta", "estate", "ping", "read", "main")
    assert policy.allows("read", "gamma", "monitor", "ping", "read", "main")
    assert not policy.allows("write", "gamma", "monitor", "ping", "", "main")
    assert policy.decide("write", "beta", "estate", "ping", "", "main").rule == 1
    assert policy.decide("write", "zeta", "estate", "ping", "", "main").rule == -1
    assert policy.counts["allowed"] == 3 and policy.counts["denied"] == 4


def test_empty_policy_denies_everything():
    assert not Policy().allows("write", "beta", "estate", "x", "", "main")


def test_channel_and_tag_globs():
    policy = Policy([{"allow": "any", "channel": "control", "tag": "cmd.*"}])
    assert policy.allows("write", "b", "r", "s", "cmd.stop", "control")
    assert not policy.allows("write", "b", "r", "s", "cmd.stop", "main")
    assert not policy.allows("write", "b", "r", "s", "other", "control")


@pytest.mark.parametrize(
    "rule, words",
    [
        ({"share": "x"}, "exactly one"),
        ({"allow": "write", "deny": "write"}, "exactly one"),
        ({"allow": "everything"}, "must be one of"),
        ({"allow": "write", "shares": "x"}, "unknown key"),
        ({"allow": "write", "share": 5}, "glob"),
        ({"allow": "write", "share": "x" * 300}, "glob"),
        ("allow all", "mapping"),
    ],
)
def test_bad_rules_say_why(rule, words):
    with pytest.raises(PolicyError, match=words):
        Policy([rule])


def test_replace_is_all_or_nothing():
    policy = Policy([{"allow": "write"}])
    with pytest.raises(PolicyError):
        policy.replace([{"deny": "write"}, {"allow": "bogus"}])
    assert policy.allows("write", "b", "r", "s", "", "main")
    policy.replace([{"deny": "write"}])
    assert not policy.allows("write", "b", "r", "s", "", "main")


def test_rule_mapping_round_trip():
    rule = Rule("allow", "write", estate="beta", share="ping.*")
    assert Rule.from_mapping(rule.to_mapping()) == rule
