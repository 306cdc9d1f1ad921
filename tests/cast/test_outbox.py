"""publish(turn=True): sent only once the turn's commit has it, both or neither with the turn's
acknowledgements, sent again after a crash under the same id, retried until it ends."""

from __future__ import annotations

from flowcast.cast.behaviours import word
from flowcast.cast.outbox import RETRY_AFTER, Outbox
from flowcast.errors import Error
from tests.cast.kit import CacheStandIn, Cast, DiskFull, outbox_house


class Refused(Error):
    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def test_a_turn_publish_leaves_only_after_the_commit_and_with_the_acknowledgement(tmp_path):
    cache = CacheStandIn()
    cast, svc, store = outbox_house(tmp_path, cache)
    svc.subscribe("abc/messages/**", estate="abc", into="inbox")
    cast.publish_many(1)
    assert cast.run_until(lambda: len(cast.queue().queue) == 1, 10)
    inbox = svc.subscriber.inbox
    disk = DiskFull(inbox, "settle")
    cast.queue().queue.popleft()
    ticket = svc.publish("xyz/confirms/0", b"ok", turn=True)
    store.end_turn()
    assert cache.sent == [] and inbox.owed_count() == 1 and inbox.outbox() == []  # neither
    disk.failing = False
    store.end_turn()
    assert cache.sent == [(ticket.id, "xyz/confirms/0", None)] and inbox.owed_count() == 0 and len(inbox.outbox()) == 1
    cache.tickets[0].seq, cache.tickets[0].done = 7, True
    store.end_turn()
    assert ticket.done and ticket.seq == 7 and ticket.error is None and inbox.outbox() == []


def test_what_the_outbox_held_at_a_crash_is_sent_again_under_its_id(tmp_path):
    cache = CacheStandIn()
    cast, svc, store = outbox_house(tmp_path, cache)
    ticket = svc.publish("xyz/confirms/1", b"ok", turn=True)
    store.end_turn()
    assert cache.sent == [(ticket.id, "xyz/confirms/1", None)]  # sent, never acknowledged: then the house dies
    again = CacheStandIn()
    cast2 = Cast(tmp_path, cache=cast.cache)
    svc2 = cast2.service()
    outbox = Outbox(again.send, cast2.world.scheduler.clock.now, word)
    svc2.subscriber.settler.outbox = outbox
    outbox.resume(svc2.subscriber.inbox.outbox())
    assert again.sent == [(ticket.id, "xyz/confirms/1", None)]


def test_a_transient_failure_is_sent_again_and_a_final_refusal_ends_the_ticket(tmp_path):
    cache = CacheStandIn()
    cast, svc, store = outbox_house(tmp_path, cache)
    lost = svc.publish("xyz/confirms/2", b"ok", turn=True)
    bad = svc.publish("xyz/confirms/3", b"ok", turn=True)
    store.end_turn()
    cache.tickets[0].error, cache.tickets[0].done = Refused("undelivered"), True
    cache.tickets[1].error, cache.tickets[1].done = Refused("too_large"), True
    store.end_turn()
    assert bad.done and word(bad.error) == "too_large" and not lost.done
    cast.world.run_for(RETRY_AFTER * 1.5)
    store.end_turn()
    assert [id for id, _name, _r in cache.sent] == [lost.id, bad.id, lost.id]  # the same id: the cache's dedupe stores it once
    cache.tickets[2].done = True
    store.end_turn()
    assert lost.done and lost.error is None and svc.subscriber.inbox.outbox() == []
