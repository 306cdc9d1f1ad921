"""Hostile review of acknowledged processing (issue 24): hand-offs, ranges, tables and the outbox.

Each test is a way the promise was found broken: a subscription's messages stay owed until
acknowledged, a restart hands over exactly what was not, first and in order; tables and
publish(turn=True) commit with the turn's acknowledgements, both or neither.
"""

from __future__ import annotations

import pytest

from tests.cast.kit import CacheStandIn, Cast, DiskFull, outbox_house

HOUR = 3600.0
APPLES = b"\xa6apples"  # msgpack of "apples"


def _drain(cast, queue, rounds: int = 20, step: float = 2.0) -> list:
    """The flow takes everything each turn, for a bounded number of turns: (tag, seq, redelivered) in order."""
    got = []
    for _ in range(rounds):
        cast.world.run_for(step)
        got += [(item["tag"], item["seq"], item.get("redelivered")) for item in queue.queue]
        queue.queue.clear()
        cast.turn()
    return got


# -- the hand-off into the queue -----------------------------------------------------------------


def test_a_gap_notice_and_a_batch_in_one_commit_never_lose_a_message_to_the_bound(tmp_path):
    """The plan counted the queue's room for the batch without the gap notice pushed before it:
    the last message was refused by the queue after its cursor and owed row committed, never
    delivered, and the next in-order range acknowledgement deleted its owed row for good."""
    cast = Cast(tmp_path, retention=HOUR)
    svc = cast.service()
    queue = cast.estates["xyz"].store("bob").queue("inbox", bound=3)
    sub = svc.subscribe("abc/messages/**", estate="abc", into="inbox")
    cast.publish_many(2)
    assert cast.run_until(lambda: sub.cursor == 2, 10)
    queue.queue.clear()
    cast.turn()
    sub.close()
    cast.publish_many(4, prefix="abc/messages/missed")  # seqs 3..6, expired while closed
    cast.world.run_for(1.1 * HOUR)
    cast.publish_many(3, prefix="abc/messages/fresh")  # seqs 7..9
    sub = svc.subscribe("abc/messages/**", estate="abc", into="inbox")
    got = _drain(cast, queue, rounds=10)
    cast.publish_many(1, prefix="abc/messages/later")  # seq 10: its range acknowledgement reaches 9
    got += _drain(cast, queue, rounds=3)
    assert [(tag, seq) for tag, seq, _r in got] == [("cast.gap", 3), ("cast", 7), ("cast", 8), ("cast", 9), ("cast", 10)]
    assert queue.dropped == 0 and svc.subscriber.inbox.owed_count() == 0


def test_a_restart_hands_over_again_what_is_owed_within_a_byte_budget_losing_none(tmp_path):
    """_replay checked the queue's count bound only: rows refused by the byte budget were popped
    from the replay all the same, never delivered, then deleted by a range acknowledgement."""
    first = Cast(tmp_path)
    sub = first.service().subscribe("abc/messages/**", estate="abc", into="inbox")
    first.publish_many(10)
    assert first.run_until(lambda: sub.cursor == 10, 10)  # owed, in the queue, never taken: then killed
    again = Cast(tmp_path, cache=first.cache)
    queue = again.estates["xyz"].store("bob").queue("inbox", budget=100)  # a few messages' bytes
    svc = again.service()
    svc.subscribe("abc/messages/**", estate="abc", into="inbox")
    got = _drain(again, queue)
    again.publish_many(1, prefix="abc/messages/later")  # seq 11
    got += _drain(again, queue, rounds=3)
    assert [seq for _tag, seq, _r in got] == list(range(1, 12))
    assert all(r for _tag, seq, r in got if seq <= 10)
    assert svc.subscriber.inbox.owed_count() == 0


def test_a_gap_notice_waits_behind_what_a_restart_still_has_to_hand_over(tmp_path):
    """Owed rows wait in the replay while the queue is full; a gap notice went into the queue
    at once (pushed past the bound), ahead of older owed messages: not first and in order."""
    first = Cast(tmp_path, retention=HOUR)
    svc = first.service()
    sub = svc.subscribe("abc/messages/**", estate="abc", into="inbox")
    first.publish_many(10)
    assert first.run_until(lambda: sub.cursor == 10, 10)  # owed, never taken
    sub.close()
    first.publish_many(4, prefix="abc/messages/missed")  # 11..14
    first.world.run_for(1.1 * HOUR)  # every message expired from the cache
    again = Cast(tmp_path, cache=first.cache, retention=HOUR)  # killed, back after retention
    again.publish_many(2, prefix="abc/messages/fresh")  # 15, 16
    queue = again.estates["xyz"].store("bob").queue("inbox", bound=3)
    again.service().subscribe("abc/messages/**", estate="abc", into="inbox")
    got = _drain(again, queue, rounds=30)
    assert [(tag, seq) for tag, seq, _r in got] == [("cast", s) for s in range(1, 11)] + [("cast.gap", 11), ("cast", 15), ("cast", 16)]
    assert [r for _tag, _seq, r in got] == [True] * 10 + [False] * 3  # a first delivery has false, gap notices too


def test_a_subscription_made_again_while_acknowledgements_fail_does_not_hand_over_twice(tmp_path):
    """The flow took and finished seq 1 (its turn ended) but the acknowledgement could not commit;
    closing and subscribing again loaded it from the owed rows and pushed it into the queue again."""
    cast = Cast(tmp_path)
    svc = cast.service()
    sub = svc.subscribe("abc/messages/**", estate="abc", into="inbox")
    cast.publish_many(3)
    queue = cast.queue()
    assert cast.run_until(lambda: len(queue.queue) == 3, 10)
    disk = DiskFull(svc.subscriber.inbox, "settle")
    assert queue.queue.popleft()["seq"] == 1
    cast.turn()  # taken, the turn ended: acknowledged, though not on disk yet
    sub.close()
    svc.subscribe("abc/messages/**", estate="abc", into="inbox")
    disk.failing = False
    cast.world.run_for(3)
    cast.turn()
    assert [item["seq"] for item in queue.queue] == [2, 3]
    assert svc.subscriber.inbox.owed_count() == 2


def test_a_subscription_acknowledges_only_its_own_deliveries(tmp_path):
    """Subscription.ack looked at the item's seq only: the same message delivered to two
    overlapping subscriptions, a's copy was acknowledged with b's item."""
    cast = Cast(tmp_path)
    svc = cast.service()
    a = svc.subscribe("abc/messages/**", estate="abc", into="inbox", ack="explicit")
    b = svc.subscribe("abc/messages/b/**", estate="abc", into="inbox", ack="explicit")
    cast.publish_many(1, prefix="abc/messages/b")
    queue = cast.queue()
    assert cast.run_until(lambda: len(queue.queue) == 2, 10)
    mine = next(item for item in queue.queue if item["sid"] == b.sid)
    assert not a.ack(mine)  # not a's delivery
    assert b.ack(mine)
    cast.turn()
    assert [seq for _sid, seq, *_rest in svc.subscriber.inbox.owed(a.sid)] == [1]
    assert svc.subscriber.inbox.owed(b.sid) == []


# -- both or neither -------------------------------------------------------------------------------


def _order_taken_with_effects_while_settle_fails(cast):
    svc = cast.service()
    svc.subscribe("abc/messages/**", estate="abc", into="inbox")
    cast.publish_many(1, prefix="abc/messages/orders")
    queue = cast.queue()
    assert cast.run_until(lambda: len(queue.queue) == 1, 10)
    disk = DiskFull(svc.subscriber.inbox, "settle")
    queue.queue.popleft()
    svc.table("stock")["apples"] = 7
    cast.turn()  # the turn's commit fails: neither (still owed, stock not on disk)
    assert svc.subscriber.inbox.owed_count() == 1 and svc.subscriber.inbox.table_get("stock", APPLES) is None
    disk.failing = False
    return svc


def test_acknowledgements_of_a_failed_turn_do_not_ride_with_the_next_arrivals_without_its_writes(tmp_path):
    """take_acks handed the failed turn's acknowledgements to the arrivals' commit; its table
    writes were only restaged in memory: a kill then lost the writes of an acknowledged order."""
    first = Cast(tmp_path)
    svc = _order_taken_with_effects_while_settle_fails(first)
    first.publish_many(1, prefix="abc/messages/more")  # a batch comes: its commit carried the acknowledgement
    first.world.run_for(0.5)
    inbox = svc.subscriber.inbox
    (sid,) = svc.subscriber.handoffs
    acked = 1 not in [row[1] for row in inbox.owed(sid)]  # the order was seq 1
    assert not acked or inbox.table_get("stock", APPLES) == b"\x07"  # both or neither
    first.world.run_for(1.5)
    assert 1 not in [row[1] for row in inbox.owed(sid)] and inbox.table_get("stock", APPLES) == b"\x07"  # then both


def test_the_tick_does_not_commit_a_failed_turns_acknowledgements_without_its_writes(tmp_path):
    cast = Cast(tmp_path)
    svc = _order_taken_with_effects_while_settle_fails(cast)
    cast.world.run_for(1.5)  # the subscriber's tick tries the failed commit again
    inbox = svc.subscriber.inbox
    assert (inbox.owed_count(), inbox.table_get("stock", APPLES)) == (0, b"\x07")  # both, without another turn


# -- the outbox ------------------------------------------------------------------------------------


def test_a_turn_that_publishes_with_a_failed_settle_commits_the_publish_with_its_acknowledgement(tmp_path):
    """The tick's retry committed the acknowledgement alone; the staged publish waited for a
    later turn's end: a kill in between lost the confirmation of an acknowledged order."""
    cache = CacheStandIn()
    cast, svc, store = outbox_house(tmp_path, cache)
    svc.subscribe("abc/messages/**", estate="abc", into="inbox")
    cast.publish_many(1)
    assert cast.run_until(lambda: len(cast.queue().queue) == 1, 10)
    inbox = svc.subscriber.inbox
    disk = DiskFull(inbox, "settle")
    cast.queue().queue.popleft()
    svc.publish("xyz/confirms/0", b"ok", turn=True)
    store.end_turn()
    disk.failing = False
    cast.world.run_for(1.5)  # the tick, no turn ended
    assert (inbox.owed_count(), len(inbox.outbox())) == (0, 1)  # both, and then sent
    assert [name for _id, name, _r in cache.sent] == ["xyz/confirms/0"]


def test_an_outbox_row_whose_publish_ended_leaves_even_if_that_turns_commit_failed(tmp_path):
    """finished() completes the tickets and hands back their ids once; a failed settle dropped
    them, so the rows stayed in the outbox and a restart (maybe past the cache's dedupe
    window) sent them again."""
    cache = CacheStandIn()
    cast, svc, store = outbox_house(tmp_path, cache)
    ticket = svc.publish("xyz/confirms/1", b"ok", turn=True)
    store.end_turn()
    assert len(cache.sent) == 1
    cache.tickets[0].seq, cache.tickets[0].done = 3, True
    inbox = svc.subscriber.inbox
    disk = DiskFull(inbox, "settle")
    store.end_turn()  # the publish ended; its row's delete fails
    assert ticket.done
    disk.failing = False
    for _ in range(3):
        store.end_turn()
        cast.world.run_for(1.5)
    assert inbox.outbox() == []


def test_turn_publish_keeps_recipients_given_as_any_iterable(tmp_path):
    """_stage consumed a generator of recipients for the check, then joined the empty remainder:
    a private publish went out public."""
    cache = CacheStandIn()
    cast, svc, store = outbox_house(tmp_path, cache)
    svc.publish("xyz/confirms/2", b"secret", recipients=(r for r in ["carol@abc"]), turn=True)
    store.end_turn()
    assert [recipients for _id, _name, recipients in cache.sent] == [["carol@abc"]]
    assert [row[3] for row in svc.subscriber.inbox.outbox()] == ["carol@abc"]


def test_ack_of_a_forged_item_is_false_not_a_crash(tmp_path):
    """ack() looked the item's seq up in a set: an unhashable seq raised TypeError into the flow."""
    cast = Cast(tmp_path)
    svc = cast.service()
    sub = svc.subscribe("abc/messages/**", estate="abc", into="inbox", ack="explicit")
    assert svc.ack({"sid": sub.sid, "seq": [1]}) is False
    assert sub.ack({"sid": sub.sid, "seq": {"x": 1}}) is False
    assert svc.ack({"sid": [sub.sid], "seq": 1}) is False


def test_changing_explicit_to_turn_does_not_acknowledge_what_the_consumer_still_holds(tmp_path):
    cast = Cast(tmp_path)
    svc = cast.service()
    sub = svc.subscribe("abc/messages/**", estate="abc", into="inbox", ack="explicit")
    cast.publish_many(3)
    queue = cast.queue()
    assert cast.run_until(lambda: len(queue.queue) == 3, 10)
    held = [queue.queue.popleft() for _ in range(3)]  # a batch the consumer works on later
    cast.turn()
    sub.close()
    svc.subscribe("abc/messages/**", estate="abc", into="inbox", ack="turn")
    cast.turn()
    assert svc.subscriber.inbox.owed_count() == 3 and len(held) == 3
    # what the consumer held settles when it acks, under the new mode; what comes now settles by turns
    assert all(svc.ack(item) for item in held)
    cast.turn()
    assert svc.subscriber.inbox.owed_count() == 0
    cast.publish_many(2)
    assert cast.run_until(lambda: len(queue.queue) == 2, 10)
    queue.queue.clear()
    cast.turn()
    assert cast.run_until(lambda: svc.subscriber.inbox.owed_count() == 0, 10)
