"""Store and shares: naming rules, stamps, history, queues."""

import pytest

from flowcast.store import QueueShare, ShareNameError, Store


def make():
    now = {"t": 0.0}
    return Store(lambda: now["t"]), now


def test_share_is_created_once_and_stamped_on_update():
    store, now = make()
    share = store.share(".peter.piper.pickled")
    assert store.share("peter.piper.pickled") is share
    assert share.stamp is None and share.value is None
    now["t"] = 2.5
    share.update(value=3, extra="x")
    assert share.value == 3 and share["extra"] == "x" and share.stamp == 2.5


@pytest.mark.parametrize("name", ["", "a..b", "../etc", "a/b", "1abc", "a b", "a." + "b" * 300, "a.\x00"])
def test_hostile_names_are_refused(name):
    store, _ = make()
    with pytest.raises(ShareNameError):
        store.share(name)
    assert len(store) == 0


def test_history_is_bounded_and_ordered():
    store, now = make()
    share = store.share("x")
    share.log(depth=3)
    for i in range(5):
        now["t"] = float(i)
        share.value = i
    assert [stamp for stamp, _ in share.history] == [2.0, 3.0, 4.0]
    assert [fields["value"] for _, fields in share.history] == [2, 3, 4]


def test_queue_share_bound_counts_drops():
    store, _ = make()
    q = store.queue("inbox", bound=2)
    assert isinstance(q, QueueShare)
    assert q.push(1) and q.push(2) and not q.push(3)
    assert q.dropped == 1 and q.drain() == [1, 2] and len(q.queue) == 0
    with pytest.raises(TypeError):
        store.share("plain").value = 1
        store.queue("plain")


def test_create_keeps_existing_fields():
    store, _ = make()
    share = store.share("s", {"a": 1})
    share.create({"a": 2, "b": 3})
    assert share.fields() == {"a": 1, "b": 3}


def test_queue_value_cannot_be_replaced_by_assignment():
    store, _ = make()
    q = store.queue("inbox")
    q.push(1)
    with pytest.raises(TypeError, match="push"):
        q.value = [9]
    q.update(note="ok")
    assert list(q.value) == [1] and q.value is q.queue and q["note"] == "ok"
