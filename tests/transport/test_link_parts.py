"""The link's parts each own their state: slots named once, no instance dict."""

from __future__ import annotations

from collections import Counter

from flowcast.transport.receiver import RECEIVER_SLOTS
from flowcast.transport.recovery import RECOVERY_SLOTS
from flowcast.transport.reliable import Link
from flowcast.transport.sender import SENDER_SLOTS


def test_each_slot_is_owned_by_one_part():
    named = Counter(Link.__slots__)
    assert [name for name, times in named.items() if times > 1] == []
    assert set(SENDER_SLOTS) | set(RECEIVER_SLOTS) | set(RECOVERY_SLOTS) <= set(Link.__slots__)


def test_a_link_has_no_instance_dict():
    # One per session: a dict would cost ~1.6 KB per remote, and an
    # attribute a part sets without naming it in its slots would go unnoticed.
    link = Link(1200, lambda *a: None)
    assert not hasattr(link, "__dict__")
    for name in Link.__slots__:
        assert hasattr(link, name), f"{name} is never set by __init__"
