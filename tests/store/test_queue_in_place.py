"""A share a flow only named can become a queue in place; one holding values cannot."""

from __future__ import annotations

import pytest

from flowcast.behaving import Registry
from flowcast.behaving.registry import Io
from flowcast.store import QueueShare, Store


def test_named_share_becomes_a_queue_everyone_sees():
    store = Store(lambda: 1.0)
    held = store.share("inbox")  # what a flow's 'from inbox' binding holds
    queue = store.queue("inbox", bound=2)
    assert queue is held and isinstance(held, QueueShare)
    assert held.push("a") and held.push("b") and not held.push("c")
    assert held.dropped == 1 and list(held.queue) == ["a", "b"]
    assert store.queue("inbox") is held  # idempotent


@pytest.mark.parametrize("spoil", ["field", "watcher"])
def test_share_with_values_or_watchers_stays_a_value_share(spoil):
    store = Store(lambda: 1.0)
    share = store.share("temp")
    if spoil == "field":
        share.update(value=3)
    else:
        share.watchers.append(lambda s: None)
    with pytest.raises(TypeError, match="cannot become a queue"):
        store.queue("temp")
    assert not isinstance(share, QueueShare)


def test_plain_shares_have_no_queue_attribute():
    share = Store().share("x")
    assert getattr(share, "queue", None) is None


def test_stock_queue_behaviour_declares_queues():
    registry = Registry()
    registry.load_entry_points()
    store = Store(lambda: 0.0)
    io = Io(store, outputs=[store.share("a"), store.share("b")])
    act = registry.find("queue").target(io, bound=5)
    assert act() is None
    assert isinstance(store.get("a"), QueueShare) and store.get("b").bound == 5


def test_declaring_a_queue_again_keeps_the_tighter_bound():
    store = Store()
    queue = store.queue("q", bound=100)
    assert store.queue("q", bound=1000).bound == 100
    assert store.queue("q", bound=10).bound == 10
    assert store.queue("q").bound == 10
    assert queue.bound == 10
