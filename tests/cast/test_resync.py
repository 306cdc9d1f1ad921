"""Resync after downtime, restart, expiry and back-pressure: explicit gaps, never silent loss, never twice."""

from __future__ import annotations

from tests.cast.kit import Cast, payloads

HOUR = 3600.0


def test_a_subscriber_restarted_resumes_from_its_durable_cursor_and_delivers_nothing_twice(tmp_path):
    first = Cast(tmp_path)
    sub = first.service().subscribe("abc/messages/**", estate="abc", into="inbox")
    first.publish_many(20)
    assert first.run_until(lambda: len(first.queue().queue) == 20, 10)
    taken = payloads(first.queue())
    first.queue().queue.clear()  # the flow took them, and its turn ended: acknowledged
    first.turn()
    sid = sub.sid
    # the cache takes more; they reach the queue, but the flow never takes them before the house is killed
    first.publish_many(15, prefix="abc/messages/away")
    assert first.run_until(lambda: len(first.queue().queue) == 15, 10)
    again = Cast(tmp_path, cache=first.cache)
    resumed = again.service().subscribe("abc/messages/**", estate="abc", into="inbox")
    assert resumed.sid == sid and resumed.cursor == 35
    again.world.run_for(5)
    got = taken + payloads(again.queue())
    assert got == [b"m%06d" % i for i in range(20)] + [b"m%06d" % i for i in range(15)]
    assert all(item["redelivered"] for item in again.queue().queue)  # recognisable: handed over before the crash


def test_a_resync_after_retention_gets_an_explicit_gap_then_what_the_cache_still_holds(tmp_path):
    cast = Cast(tmp_path, retention=HOUR)  # an hour, not a day: the same path, 24 times fewer timer events
    svc = cast.service()
    sub = svc.subscribe("abc/messages/**", estate="abc", into="inbox")
    cast.publish_many(10)
    assert cast.run_until(lambda: sub.cursor == 10, 10)
    sub.close()
    cast.publish_many(20, prefix="abc/messages/missed")
    cast.world.run_for(1.1 * HOUR)  # past retention: the cache expired them
    assert cast.cache.stats()["messages"] == 0
    cast.publish_many(5, prefix="abc/messages/fresh")
    back = svc.subscribe("abc/messages/**", estate="abc", into="inbox")
    assert back.sid == sub.sid and back.cursor == 10
    assert cast.run_until(lambda: back.cursor == 35, 10)
    items = list(cast.queue().queue)
    gaps = [item for item in items if item["tag"] == "cast.gap"]
    assert [g["data"] for g in gaps] == [{"from": 11, "upto": 30}] and back.gaps == [(11, 30)]
    assert payloads(cast.queue()) == [b"m%06d" % i for i in range(10)] + [b"m%06d" % i for i in range(5)]
    assert items.index(gaps[0]) == 10  # in stream order: after what came before, before what comes after


def test_a_full_queue_share_is_back_pressure_and_loses_nothing(tmp_path):
    cast = Cast(tmp_path)
    inbox = cast.estates["xyz"].store("bob").queue("inbox", bound=7)
    sub = cast.service().subscribe("abc/messages/**", estate="abc", into="inbox")
    cast.publish_many(100)
    got = []
    for _ in range(200):
        if not cast.run_until(lambda: len(inbox.queue) == 7 or sub.cursor == 100, 5):
            break
        got.extend(payloads(inbox))
        inbox.queue.clear()
        if sub.cursor == 100 and len(got) == 100:
            break
    assert inbox.dropped == 0 and got == [b"m%06d" % i for i in range(100)]
    assert cast.service().subscriber.counts["blocked"] > 0


def test_an_inbox_that_cannot_commit_pushes_nothing_and_the_messages_come_again(tmp_path):
    import sqlite3

    cast = Cast(tmp_path)
    subscriber = cast.service().subscriber
    sub = cast.service().subscribe("abc/messages/**", estate="abc", into="inbox")
    assert cast.run_until(lambda: sub.state == "active", 5)
    real = subscriber.inbox.commit_many
    failures = []

    def full_disk(cursors, rows, *more):
        if len(failures) < 3:
            failures.append(len(rows))
            raise sqlite3.OperationalError("database or disk is full")
        return real(cursors, rows, *more)

    subscriber.inbox.commit_many = full_disk
    cast.publish_many(25)
    assert cast.run_until(lambda: len(failures) == 3, 10)
    assert sub.cursor == 0 or len(cast.queue().queue) == sub.cursor  # nothing pushed past what is committed
    assert cast.run_until(lambda: sub.cursor == 25, 60)  # the renew sends it all again
    assert payloads(cast.queue()) == [b"m%06d" % i for i in range(25)]
    assert subscriber.counts["inbox_failed"] == 3


def test_a_subscriber_too_slow_for_retention_gets_an_explicit_gap_not_a_silent_loss(tmp_path):
    cast = Cast(tmp_path, retention=HOUR)
    inbox = cast.estates["xyz"].store("bob").queue("inbox", bound=5)
    sub = cast.service().subscribe("abc/messages/**", estate="abc", into="inbox")
    cast.publish_many(50)
    assert cast.run_until(lambda: len(inbox.queue) == 5 and sub.blocked, 10)
    cast.world.run_for(1.1 * HOUR)  # the application does not read; the other 45 expire meanwhile
    # The renews kept the lease; once the 45 expired, the gap came, behind the five (past the bound).
    assert sub.cursor == 50 and sub.gaps == [(6, 50)]
    assert [item["tag"] for item in inbox.queue] == ["cast"] * 5 + ["cast.gap"]
    assert inbox.queue[-1]["data"] == {"from": 6, "upto": 50} and inbox.dropped == 0
    first = payloads(inbox)
    inbox.queue.clear()
    cast.publish_many(3, prefix="abc/messages/new")
    assert cast.run_until(lambda: sub.cursor == 53, 10)
    assert first == [b"m%06d" % i for i in range(5)] and payloads(inbox) == [b"m%06d" % i for i in range(3)]


def test_both_houses_restarted_mid_stream_deliver_every_acknowledged_message_once_in_order(tmp_path):
    first = Cast(tmp_path, config={"window": 20}, delay=0.01)
    sub = first.service().subscribe("abc/messages/**", estate="abc", into="inbox")
    acked = first.publish_many(300)
    assert first.run_until(lambda: sub.cursor >= 100, 10)
    assert sub.cursor < 300  # batches still in flight when both houses stop: nothing closed, nothing flushed
    queue = first.queue().queue
    taken = [queue.popleft() for _ in range(len(queue) // 2)]  # the flow took half and its turn ended
    first.turn()
    again = Cast(tmp_path, cache=first.cache, config={"window": 20})
    resumed = again.service().subscribe("abc/messages/**", estate="abc", into="inbox")
    more = again.publish_many(20, prefix="abc/messages/after")
    assert again.run_until(lambda: resumed.cursor == 320, 20)
    again.world.run_for(5)
    got = taken + list(again.queue().queue)  # the other half, never taken, is handed over again
    assert [item["id"] for item in got] == [t.id for t in acked + more]
    assert not any(item["redelivered"] for item in taken) and again.queue().queue[0]["redelivered"]


def test_renews_that_arrive_together_rewind_once_and_an_explicit_ask_still_rewinds(tmp_path):
    """Was (found building the export's resync table): renews queued behind a partition arrived
    together after it healed, and each rewound the subscription: a 240 s cut re-sent the same
    range 30 times.  A renew repeating the last rewind's cursor and ask now renews the lease only."""
    cast = Cast(tmp_path)
    subscriber = cast.service().subscriber
    sub = cast.service().subscribe("abc/messages/**", estate="abc", into="inbox")
    assert cast.run_until(lambda: sub.state == "active", 5)
    cast.publish_many(5)
    assert cast.run_until(lambda: sub.cursor == 5, 10)
    publisher = cast.pub.publisher
    cast.world.run_for(2)  # past the subscribe's own rewind
    sub.cursor = 0  # as a subscriber that lost its last commit would ask
    for _ in range(6):
        subscriber._send_sub(sub, ask=False)
    sent_before = publisher.counts["forwarded"]
    assert cast.run_until(lambda: publisher.counts["renewed"] >= 6, 10)
    assert publisher.counts["rewind_repeated"] == 5
    subscriber._send_sub(sub, ask=True)  # an explicit ask is served even right after
    assert cast.run_until(lambda: publisher.counts["renewed"] >= 7, 10)
    assert publisher.counts["rewind_repeated"] == 5
    cast.world.run_for(2)
    assert payloads(cast.queue()) == [b"m%06d" % i for i in range(5)]  # exactly once to the application
    assert publisher.counts["forwarded"] - sent_before <= 2 * 5  # one rewind after the renews, one for the ask
