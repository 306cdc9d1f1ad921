"""The channel's parts each own their state: slots named once, no instance dict."""

from __future__ import annotations

from collections import Counter

from flowcast.transport.receiver import RECEIVER_SLOTS
from flowcast.transport.recovery import RECOVERY_SLOTS
from flowcast.transport.reliable import Channel
from flowcast.transport.sender import SENDER_SLOTS


def test_each_slot_is_owned_by_one_part():
    named = Counter(Channel.__slots__)
    assert [name for name, times in named.items() if times > 1] == []
    assert set(SENDER_SLOTS) | set(RECEIVER_SLOTS) | set(RECOVERY_SLOTS) <= set(Channel.__slots__)


def test_a_channel_has_no_instance_dict():
    # One per session: a dict would cost ~1.6 KB per remote, and an
    # attribute a part sets without naming it in its slots would go unnoticed.
    channel = Channel(1200, lambda *a: None)
    assert not hasattr(channel, "__dict__")
    for name in Channel.__slots__:
        assert hasattr(channel, name), f"{name} is never set by __init__"
