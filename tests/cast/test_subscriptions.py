"""Subscribe, deliver, renew, resync: the publishing estate's cache reaches a remote queue share once each."""

from __future__ import annotations

from tests.cast.kit import Cast, payloads


def test_a_subscription_gets_the_cache_then_the_live_stream_once_in_order(tmp_path):
    cast = Cast(tmp_path)
    stored = cast.publish_many(50)
    sub = cast.service().subscribe("abc/messages/**", estate="abc", into="inbox")
    inbox = cast.queue()
    assert cast.run_until(lambda: len(inbox.queue) == 50, 10)
    assert sub.state == "active"
    tickets = [cast.pub.publish(f"abc/messages/alice/live{i}", b"live%d" % i, publisher="alice") for i in range(20)]
    assert cast.run_until(lambda: len(inbox.queue) == 70, 10)
    assert payloads(inbox) == [b"m%06d" % i for i in range(50)] + [b"live%d" % i for i in range(20)]
    first = inbox.queue[0]
    assert first["name"] == "abc/messages/alice/0" and first["publisher"] == "alice" and first["seq"] == 1
    assert first["id"] == stored[0].id and all(t.done and not t.error for t in tickets)
    assert first["route"]["src"][2] == "abc" and first["route"]["dst"][:3] == ["inbox", "bob", "xyz"]


def _ports(estate):
    return [f"{estate}/{yard}" for yard in ("manor", "bob", "carol", "w1")] + [f"{estate}:main"]


def test_a_subscriber_down_while_10000_are_published_gets_all_once_in_order_then_live(tmp_path):
    cast = Cast(tmp_path)
    sub = cast.service().subscribe("abc/messages/**", estate="abc", into="inbox")
    inbox = cast.queue()
    cast.publish_many(10)
    assert cast.run_until(lambda: len(inbox.queue) == 10, 10)
    cast.world.net.partition(_ports("abc"), _ports("xyz"))
    cast.publish_many(10_000, prefix="abc/messages/down")
    cast.world.run_for(5)
    assert len(inbox.queue) == 10  # nothing crossed
    cast.world.net.heal()
    assert cast.run_until(lambda: len(inbox.queue) >= 10_010, 120)
    cast.publish_many(5, prefix="abc/messages/after")
    assert cast.run_until(lambda: len(inbox.queue) == 10_015, 30)
    cast.world.run_for(30)  # renews and resends meanwhile add nothing
    got = payloads(inbox)
    assert got == [b"m%06d" % i for i in range(10)] + [b"m%06d" % i for i in range(10_000)] + [b"m%06d" % i for i in range(5)]
    seqs = [item["seq"] for item in inbox.queue]
    assert seqs == sorted(set(seqs)) and sub.cursor == 10_015


def test_a_lease_not_renewed_expires_forwarding_stops_and_a_later_resync_gets_everything(tmp_path):
    cast = Cast(tmp_path)
    sub = cast.service().subscribe("abc/messages/**", estate="abc", into="inbox", lease=6.0)
    inbox = cast.queue()
    cast.publish_many(3)
    assert cast.run_until(lambda: len(inbox.queue) == 3, 10)
    publisher = cast.pub.publisher
    assert len(publisher.subs) == 1
    cast.world.net.partition(_ports("abc"), _ports("xyz"))  # the renews do not arrive
    assert cast.run_until(lambda: publisher.counts["lease_expired"] == 1, 10)
    assert publisher.subs == {}
    forwarded = publisher.counts["forwarded"]
    cast.publish_many(40, prefix="abc/messages/later")
    cast.world.run_for(1)
    assert publisher.counts["forwarded"] == forwarded  # nobody to forward to
    cast.world.net.heal()
    assert cast.run_until(lambda: len(inbox.queue) == 43, 30)  # the next renew resyncs from the cursor
    assert payloads(inbox) == [b"m%06d" % i for i in range(3)] + [b"m%06d" % i for i in range(40)]
    assert sub.state == "active" and len(publisher.subs) == 1


def test_overlapping_patterns_resyncs_and_retried_publishes_are_each_once_per_subscription(tmp_path):
    cast = Cast(tmp_path)
    svc = cast.service()
    wide = svc.subscribe("abc/messages/**", estate="abc", into="wide")
    narrow = svc.subscribe("abc/messages/alice/*", estate="abc", into="narrow")
    tickets = cast.publish_many(30)
    again = [cast.pub.publish(f"abc/messages/alice/{i}", b"m%06d" % i, id=t.id) for i, t in enumerate(tickets[:10])]
    assert cast.run_until(lambda: all(t.done for t in again), 5)
    assert all(t.duplicate and t.seq == old.seq for t, old in zip(again, tickets))
    cast.publish_many(5, prefix="abc/messages/bob/x")
    for _ in range(3):  # resync from an old cursor: what comes again is not delivered again
        narrow.cursor = wide.cursor = 0
        svc.subscriber._send_sub(narrow)
        svc.subscriber._send_sub(wide)
        cast.world.run_for(2)
    assert payloads(cast.queue(name="narrow")) == [b"m%06d" % i for i in range(30)]
    assert payloads(cast.queue(name="wide")) == [b"m%06d" % i for i in range(30)] + [b"m%06d" % i for i in range(5)]
    assert narrow.duplicates >= 30 and wide.duplicates >= 35


def test_a_rare_pattern_behind_many_other_names_is_not_skipped_by_a_bounded_scan(tmp_path):
    cast = Cast(tmp_path, config={"window": 50})  # reads of 50 scan 400 rows at most
    cast.publish_many(2000, prefix="abc/messages/noise")
    cast.pub.publish("abc/rare/one", b"the one", publisher="alice")
    cast.publish_many(10, prefix="abc/messages/noise2")
    sub = cast.service().subscribe("abc/rare/*", estate="abc", into="inbox")  # a resync from 0 through all of it
    assert cast.run_until(lambda: sub.delivered == 1, 10)
    assert payloads(cast.queue()) == [b"the one"]
