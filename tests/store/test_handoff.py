"""Handoff: what left the queue is settled once, what is still there stays owed, by any reader."""

from __future__ import annotations

from flowcast.store import Handoff, Store


def _queue(bound: int = 0):
    return Store(name="t").queue("inbox", bound=bound)


def test_taken_items_settle_once_in_push_order_and_the_rest_stay_owed():
    queue = _queue()
    handoff = Handoff(queue)
    for n in range(5):
        assert handoff.push({"n": n}, n)
    assert handoff.settled() == []  # nothing taken
    queue.queue.popleft()
    queue.queue.popleft()
    assert handoff.settled() == [0, 1] and len(handoff) == 3
    assert handoff.settled() == []
    queue.queue.clear()
    assert handoff.settled() == [2, 3, 4] and len(handoff) == 0


def test_other_writers_items_before_ours_do_not_hide_a_take():
    queue = _queue()
    handoff = Handoff(queue)
    queue.push("someone else's")
    handoff.push("ours-0", 0)
    queue.push("someone else's, later")
    handoff.push("ours-1", 1)
    del queue.queue[1]  # ours-0 taken from the middle; the head is another writer's
    assert handoff.settled() == [0] and handoff.owes(1)


def test_explicit_mode_settles_only_what_was_acked_taken_or_not():
    queue = _queue()
    handoff = Handoff(queue, explicit=True)
    for n in range(3):
        handoff.push(n, n)
    queue.queue.clear()
    assert handoff.settled() == []  # taken is not enough
    assert handoff.ack(1) and not handoff.ack(7)
    assert handoff.settled() == [1] and handoff.owes(0) and handoff.owes(2)


def test_a_refused_push_is_not_owed_and_a_forced_one_passes_the_bound():
    queue = _queue(bound=1)
    handoff = Handoff(queue)
    assert handoff.push("a", 0) and not handoff.push("b", 1)
    assert not handoff.owes(1) and handoff.room() == 0
    assert handoff.push("gap", 2, force=True) and len(queue.queue) == 2 and handoff.owes(2)
