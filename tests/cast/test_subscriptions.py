"""Subscribe, deliver, renew, resync: the publishing estate's cache reaches a remote queue share once each."""

from __future__ import annotations

from tests.cast.kit import Cast, payloads


def test_a_subscription_gets_the_cache_then_the_live_stream_once_in_order(tmp_path):
    cast = Cast(tmp_path)
    cast.publish_many(50)
    sub = cast.service().subscribe("abc/messages/**", estate="abc", into="inbox")
    inbox = cast.queue()
    assert cast.run_until(lambda: len(inbox.queue) == 50, 10)
    assert sub.state == "active"
    tickets = [cast.pub.publish(f"abc/messages/alice/live{i}", b"live%d" % i, publisher="alice") for i in range(20)]
    assert cast.run_until(lambda: len(inbox.queue) == 70, 10)
    assert payloads(inbox) == [b"m%06d" % i for i in range(50)] + [b"live%d" % i for i in range(20)]
    first = inbox.queue[0]
    assert first["name"] == "abc/messages/alice/0" and first["publisher"] == "alice" and first["seq"] == 1
    assert first["id"] == cast.cache.rows[1].id and all(t.done and not t.error for t in tickets)
    assert first["route"]["src"][2] == "abc" and first["route"]["dst"][:3] == ["inbox", "bob", "xyz"]
