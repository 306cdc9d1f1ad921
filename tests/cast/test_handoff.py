"""Acknowledged processing on the simulated network: explicit acks, durable tables committed with
acknowledgements (both or neither), gap notices owed like messages."""

from __future__ import annotations

import pytest

from tests.cast.kit import Cast, DiskFull, payloads

HOUR = 3600.0


def _bob(cast):
    return cast.estates["xyz"].store("bob")


def test_an_explicit_subscription_redelivers_what_was_taken_but_not_acked(tmp_path):
    first = Cast(tmp_path)
    svc = first.service()
    svc.subscribe("abc/messages/**", estate="abc", into="inbox", ack="explicit")
    first.publish_many(10)
    assert first.run_until(lambda: len(first.queue().queue) == 10, 10)
    taken = [first.queue().queue.popleft() for _ in range(10)]
    for item in taken[:4]:
        assert svc.ack(item)
    first.turn()
    assert svc.subscriber.inbox.owed_count() == 6  # taken is not enough in explicit mode
    again = Cast(tmp_path, cache=first.cache)
    again.service().subscribe("abc/messages/**", estate="abc", into="inbox", ack="explicit")
    again.world.run_for(3)
    assert payloads(again.queue()) == [b"m%06d" % i for i in range(4, 10)]
    assert all(item["redelivered"] for item in again.queue().queue)


def test_a_table_write_and_the_acknowledgement_commit_together_or_not_at_all(tmp_path):
    cast = Cast(tmp_path)
    svc = cast.service()
    svc.subscribe("abc/messages/**", estate="abc", into="inbox")
    cast.publish_many(3)
    assert cast.run_until(lambda: len(cast.queue().queue) == 3, 10)
    inbox = svc.subscriber.inbox
    disk = DiskFull(inbox, "settle")
    stock = svc.table("stock")
    item = cast.queue().queue.popleft()
    stock["apples"] = 7
    cast.turn()
    assert inbox.owed_count() == 3 and inbox.table_get("stock", b"\xa6apples") is None  # neither
    assert stock["apples"] == 7  # still what the flow reads
    disk.failing = False
    cast.turn()  # the next turn's end tries again: both
    assert inbox.owed_count() == 2 and stock["apples"] == 7
    assert inbox.table_get("stock", b"\xa6apples") == b"\x07"
    assert item["data"] == b"m000000"


def test_a_table_survives_a_restart_and_refuses_what_msgpack_cannot_pack(tmp_path):
    first = Cast(tmp_path)
    table = first.service().table("totals")
    table["n"] = 41
    table[b"raw"] = [1, 2]
    first.turn()
    again = Cast(tmp_path, cache=first.cache)
    totals = again.service().table("totals")
    assert totals["n"] == 41 and dict(totals.items()) == {"n": 41, b"raw": [1, 2]}
    del totals["n"]
    again.turn()
    assert "n" not in totals and len(totals) == 1
    with pytest.raises(TypeError, match="msgpack"):
        totals["x"] = object()


def test_a_gap_notice_not_taken_before_a_crash_is_handed_over_again(tmp_path):
    first = Cast(tmp_path, retention=HOUR)
    svc = first.service()
    sub = svc.subscribe("abc/messages/**", estate="abc", into="inbox")
    first.publish_many(2)
    assert first.run_until(lambda: sub.cursor == 2, 10)
    first.queue().queue.clear()
    first.turn()
    sub.close()
    first.publish_many(4, prefix="abc/messages/missed")
    first.world.run_for(1.1 * HOUR)  # expired while the subscription was closed
    svc.subscribe("abc/messages/**", estate="abc", into="inbox")
    assert first.run_until(lambda: any(i["tag"] == "cast.gap" for i in first.queue().queue), 10)
    again = Cast(tmp_path, cache=first.cache, retention=HOUR)  # killed before the flow took the notice
    again.service().subscribe("abc/messages/**", estate="abc", into="inbox")
    again.world.run_for(2)
    gaps = [i for i in again.queue().queue if i["tag"] == "cast.gap"]
    assert [g["data"] for g in gaps] == [{"from": 3, "upto": 6}] and gaps[0]["redelivered"]


def test_ack_none_keeps_no_copy_so_a_restart_does_not_hand_over_again(tmp_path):
    first = Cast(tmp_path)
    svc = first.service()
    svc.subscribe("abc/messages/**", estate="abc", into="inbox", ack="none")
    first.publish_many(5)
    assert first.run_until(lambda: len(first.queue().queue) == 5, 10)
    assert svc.subscriber.inbox.owed_count() == 0  # at most once across a crash: the documented price
    again = Cast(tmp_path, cache=first.cache)
    again.service().subscribe("abc/messages/**", estate="abc", into="inbox", ack="none")
    again.world.run_for(3)
    assert payloads(again.queue()) == []


def test_acknowledgements_out_of_order_go_one_by_one_and_a_range_takes_only_what_is_below_it(tmp_path):
    cast = Cast(tmp_path)
    svc = cast.service()
    svc.subscribe("abc/messages/**", estate="abc", into="inbox", ack="explicit")
    cast.publish_many(6)
    assert cast.run_until(lambda: len(cast.queue().queue) == 6, 10)
    inbox = svc.subscriber.inbox
    seen = []
    real = inbox.settle
    inbox.settle = lambda acks, rows, publishes, published, ranges: (seen.append((list(acks), dict(ranges))),
                                                                     real(acks, rows, publishes, published, ranges))
    items = list(cast.queue().queue)
    svc.ack(items[3])  # the 4th acked while the 3rd is not: one by one, never a range over the 3rd
    cast.turn()
    assert inbox.owed_count() == 5
    inbox.settle(*([],) * 4, {items[0]["sid"]: 1})  # (a range is what an in-order reader's turn commits)
    assert inbox.owed_count() == 4
    (acks, ranges), = seen[:1]
    assert [seq for _sid, seq in acks] == [4] and ranges == {}
