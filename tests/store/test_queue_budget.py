"""A queue share's byte budget: what readers take frees room; what does not fit is refused and counted."""

from __future__ import annotations

import pytest

from flowcast.behaving import Registry
from flowcast.behaving.registry import Io
from flowcast.store import Store


def test_a_push_over_the_budget_is_refused_and_counted():
    queue = Store().queue("q", budget=100)
    assert queue.push("a", 60) and queue.push("b", 40)
    assert not queue.push("c", 7)
    assert list(queue.queue) == ["a", "b"] and queue.held_bytes == 100
    assert queue.dropped == 1 and queue.dropped_budget == 1 and queue.dropped_bytes == 7
    assert "100 of 100 bytes" in queue.full(1)


def test_bytes_taken_off_the_queue_by_readers_free_room():
    queue = Store().queue("q", budget=100)
    for name in "abcd":
        assert queue.push(name, 25)
    assert queue.queue.popleft() == "a"  # what route send and forward do
    assert queue.held_bytes == 75
    assert queue.push("e", 25) and not queue.push("f", 25)
    queue.pop()
    queue.pop()
    assert queue.held_bytes == 50 and queue.push("f", 50)
    assert queue.drain() == ["d", "e", "f"] and queue.held_bytes == 0
    assert queue.push("g", 100)


def test_one_message_larger_than_the_budget_never_fits():
    queue = Store().queue("q", budget=10)
    assert not queue.push("big", 11)
    assert queue.held_bytes == 0 and queue.dropped_budget == 1 and queue.dropped_bytes == 11


def test_the_message_bound_still_applies_with_a_budget():
    queue = Store().queue("q", bound=2, budget=1000)
    assert queue.push(1, 1) and queue.push(2, 1) and not queue.push(3, 1)
    assert queue.dropped == 1 and queue.dropped_budget == 0 and queue.dropped_bytes == 0
    assert "2 of 2 messages" in queue.full()


def test_a_budget_declared_later_counts_queued_messages_as_zero_and_tightens_only():
    store = Store()
    queue = store.queue("q")
    queue.push("old")
    store.queue("q", budget=100)
    assert queue.budget == 100 and queue.held_bytes == 0
    assert queue.push("new", 100)
    queue.pop()  # "old" leaves: frees nothing, the new one still counts
    assert queue.held_bytes == 100
    assert store.queue("q", budget=1000).budget == 100
    assert store.queue("q", budget=50).budget == 50
    with pytest.raises(ValueError, match="budget"):
        store.queue("q", budget=-1)


def test_stock_queue_behaviour_sets_a_byte_budget_by_default_and_on_request():
    registry = Registry()
    registry.load_entry_points()
    store = Store(lambda: 0.0)
    target = registry.find("queue").target
    target(Io(store, outputs=[store.share("a")]))
    target(Io(store, outputs=[store.share("b")]), bytes=4096)
    target(Io(store, outputs=[store.share("c")]), bytes=0)
    assert store.get("a").budget == 32 << 20
    assert store.get("b").budget == 4096
    assert store.get("c").budget == 0
    with pytest.raises(ValueError, match="bytes"):
        target(Io(store, outputs=[store.share("d")]), bytes=-5)


def test_a_flow_declares_a_queue_budget_in_bytes(tmp_path):
    from flowcast.house.house import load_house

    flow = tmp_path / "q.flo"
    flow.write_text(
        "house q\nframer main be active first start\nframe start\n"
        "    do queue to inbox with bound 10 bytes 4096 at enter\n"
        "    do queue to other at enter\n"
    )
    house = load_house(flow, virtual=True)
    house.run(0.1)
    assert (house.store.get("inbox").bound, house.store.get("inbox").budget) == (10, 4096)
    assert house.store.get("other").budget == 32 << 20


def test_take_hands_over_a_message_with_the_bytes_it_was_counted_at():
    queue = Store().queue("q", budget=100)
    assert queue.push("a", 30) and queue.push("b", 20)
    assert queue.take() == ("a", 30) and queue.held_bytes == 20
    assert queue.take() == ("b", 20) and queue.held_bytes == 0
    plain = Store().queue("unsized")
    plain.push("c")
    assert plain.take() == ("c", None)  # no budget: never sized
    with pytest.raises(IndexError):
        plain.take()


def _forward(store, source, target):
    registry = Registry()
    registry.load_entry_points()
    registry.find("forward").target(Io(store, inputs=[store.get(source)], outputs=[store.get(target)]))


def test_forward_carries_each_message_s_bytes_to_the_output_budget():
    store = Store(lambda: 0.0)
    source = store.queue("in", budget=10_000)
    target = store.queue("out", budget=2500)
    for name in "abcd":
        assert source.push(name, 1000)
    _forward(store, "in", "out")
    assert list(target.queue) == ["a", "b"] and target.held_bytes == 2000
    assert target.dropped_budget == 2 and target.dropped_bytes == 2000
    assert not source.queue and source.held_bytes == 0


def test_forward_from_an_unbudgeted_queue_charges_an_estimate():
    store = Store(lambda: 0.0)
    source = store.queue("in")
    target = store.queue("out", budget=2500)
    for _ in range(3):
        source.push({"data": b"x" * 1000})
    _forward(store, "in", "out")
    assert len(target.queue) == 2 and target.held_bytes > 2000 and target.dropped_budget == 1
