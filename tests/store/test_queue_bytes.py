"""Every queue share has a byte budget: a declared one, or its store's default (error queues their own)."""

from __future__ import annotations

import pytest

from flowcast.store import Store
from flowcast.store.store import ERROR_QUEUE_BYTES, QUEUE_BYTES


def test_a_queue_nothing_declared_a_budget_for_has_the_stores_default():
    store = Store()
    assert store.queue("inbox").budget == QUEUE_BYTES
    assert store.queue("inbox.error", 1000).budget == ERROR_QUEUE_BYTES
    assert not store.get("inbox").budget_declared


def test_a_share_named_first_and_made_a_queue_later_gets_the_default_too():
    store = Store()
    store.share("later.error")  # a flow names it before anything declares it a queue
    assert store.queue("later.error").budget == ERROR_QUEUE_BYTES


def test_a_declaration_replaces_the_default_even_to_loosen_it_and_then_only_tightens():
    store = Store()
    store.queue("q")
    assert store.queue("q", budget=QUEUE_BYTES * 2).budget == QUEUE_BYTES * 2  # the default was no declaration
    assert store.queue("q").budget == QUEUE_BYTES * 2  # a default does not replace a declaration
    assert store.queue("q", budget=QUEUE_BYTES * 4).budget == QUEUE_BYTES * 2
    assert store.queue("q", budget=100).budget == 100


def test_a_declared_zero_means_no_budget_and_the_default_does_not_come_back():
    store = Store()
    store.queue("free")
    assert store.queue("free", budget=0).budget == 0
    store.set_queue_defaults(queue_bytes=1000)
    assert store.get("free").budget == 0


def test_changed_defaults_reach_the_queues_that_have_them_now_and_not_declared_ones():
    store = Store()
    plain, errors, declared = store.queue("a"), store.queue("a.error"), store.queue("b", budget=500)
    store.set_queue_defaults(queue_bytes=4096, error_queue_bytes=2048)
    assert (plain.budget, errors.budget, declared.budget) == (4096, 2048, 500)
    assert store.queue("c").budget == 4096 and store.queue("c.error").budget == 2048
    with pytest.raises(ValueError, match="bytes"):
        store.set_queue_defaults(queue_bytes=0)


def test_a_default_budget_refuses_the_newest_message_and_counts_it():
    store = Store()
    store.set_queue_defaults(error_queue_bytes=100)
    errors = store.queue("s.error", 1000)
    assert errors.push("first", 60)
    assert not errors.push("second", 60)  # the newest is the one dropped
    assert list(errors.queue) == ["first"]
    assert (errors.dropped, errors.dropped_budget, errors.dropped_bytes) == (1, 1, 60)


def test_a_message_pushed_without_a_size_is_handed_on_as_unsized():
    store = Store()
    queue = store.queue("q")
    queue.push("plain")
    assert queue.take() == ("plain", None)  # forward estimates it for the next queue's budget
