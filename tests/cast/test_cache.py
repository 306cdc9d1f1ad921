"""flowcast.cast.cache: durable publish, dedupe over retention, expiry, byte limit, reads."""

from __future__ import annotations

import pytest

from flowcast.cast import Cache, CacheError, CacheFull, CastNameError, IdMaker, new_id
from flowcast.runtime.clock import RealClock
from flowcast.runtime.scheduler import Scheduler

from .cachekit import DAY, HOUR, publish_now, read_all, virtual_cache


def test_publish_is_acknowledged_with_a_seq_and_reads_back_in_order(tmp_path):
    cache, _ = virtual_cache(tmp_path)
    tickets = [cache.publish(f"abc/m/alice/{i}", b"%d" % i, publisher="alice") for i in range(5)]
    assert not any(t.done for t in tickets)  # nothing is acknowledged before it is written
    cache.flush()
    assert [t.seq for t in tickets] == [1, 2, 3, 4, 5] and all(t.ok and not t.duplicate for t in tickets)
    got = read_all(cache)
    assert [m.data for m in got] == [b"0", b"1", b"2", b"3", b"4"]
    assert got[0].publisher == "alice" and got[0].id == tickets[0].id and got[0].recipients is None
    cache.close()


def test_a_retried_id_is_stored_once_within_retention(tmp_path):
    cache, clock = virtual_cache(tmp_path)
    first = publish_now(cache, "abc/m/1", b"a")
    again = publish_now(cache, "abc/m/1", b"a", id=first.id)
    assert again.duplicate and again.seq == first.seq
    clock.advance_to(DAY - 1)
    cache.expire()
    late = publish_now(cache, "abc/m/1", b"a", id=first.id)
    assert late.duplicate and late.seq == first.seq
    # and inside one transaction: the second of two equal ids is the duplicate
    ident = new_id()
    pair = [cache.publish("abc/m/2", b"b", id=ident), cache.publish("abc/m/2", b"b", id=ident)]
    cache.flush()
    assert [t.duplicate for t in pair] == [False, True] and pair[0].seq == pair[1].seq
    assert [m.data for m in read_all(cache)] == [b"a", b"b"]
    cache.close()


def test_an_id_is_remembered_ten_minutes_past_expiry_then_stored_again(tmp_path):
    cache, clock = virtual_cache(tmp_path)
    first = publish_now(cache, "abc/m/1", b"a")
    clock.advance_to(DAY + 1)
    cache.expire()
    cache.flush()
    assert read_all(cache) == []  # the message expired
    retry = publish_now(cache, "abc/m/1", b"a", id=first.id)
    assert retry.duplicate and retry.seq == first.seq  # its id did not
    clock.advance_to(DAY + 601)
    cache.expire()
    cache.flush()
    anew = publish_now(cache, "abc/m/1", b"a", id=first.id)
    assert not anew.duplicate and anew.seq > first.seq
    cache.close()


def test_expiry_after_25_simulated_hours_is_real(tmp_path):
    cache, clock = virtual_cache(tmp_path)
    for i in range(30):
        publish_now(cache, f"abc/m/{i}", b"x" * 10)
        clock.advance_to(clock.now() + HOUR)  # one an hour: 30 hours of them
    # now = 30 h: the first 6 (published at 0..5 h) are past 24 h, the one at 6 h just reaches it
    ticket = cache.expire()
    cache.flush()
    assert ticket.ok and ticket.seq == 7
    left = read_all(cache)
    assert [m.seq for m in left] == list(range(8, 31))
    stats = cache.stats()
    assert stats["messages"] == 23 and stats["low_seq"] == 8 and stats["high_seq"] == 30
    clock.advance_to(clock.now() + 25 * HOUR)
    cache.expire()
    cache.flush()
    assert read_all(cache) == [] and cache.stats()["messages"] == 0 and cache.stats()["bytes"] == 0
    assert cache.low_seq == 31 and cache.high_seq == 30
    cache.close()
    # and it is on disk, not only in memory: the rows are gone from the file
    import sqlite3

    conn = sqlite3.connect(tmp_path / "cast" / "cache.sqlite3")
    assert conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 0
    conn.close()


def test_a_read_skips_what_expired_even_before_the_expiry_pass(tmp_path):
    cache, clock = virtual_cache(tmp_path)
    publish_now(cache, "abc/m/old", b"o")
    clock.advance_to(12 * HOUR)
    publish_now(cache, "abc/m/new", b"n")
    clock.advance_to(DAY + HOUR)
    assert [m.name for m in read_all(cache)] == ["abc/m/new"]
    cache.close()


def test_the_byte_limit_refuses_and_evicts_nothing(tmp_path):
    cache, clock = virtual_cache(tmp_path, max_bytes=1000)
    kept = [publish_now(cache, f"abc/m/{i}", b"x" * 100) for i in range(8)]  # 100 + 7 + 16 bytes each
    assert all(t.ok for t in kept) and cache.stats()["bytes"] == 8 * 123 == 984
    refused = publish_now(cache, "abc/m/8", b"x" * 100)
    assert isinstance(refused.error, CacheFull) and refused.error.reason == "cache_full"
    assert "full" in str(refused.error) and refused.seq == 0
    # a retry of something stored is still acknowledged as the duplicate it is
    retry = publish_now(cache, "abc/m/0", b"x" * 100, id=kept[0].id)
    assert retry.ok and retry.duplicate
    assert [m.seq for m in read_all(cache)] == [t.seq for t in kept]  # nothing evicted
    clock.advance_to(DAY + 1)  # once they expire, there is room again
    cache.expire()
    cache.flush()
    assert publish_now(cache, "abc/m/9", b"x" * 100).ok
    cache.close()


def test_bad_input_is_refused_at_once_with_a_reason(tmp_path):
    cache, _ = virtual_cache(tmp_path, max_message=1000)
    cases = [
        (lambda: cache.publish("xyz/m/1", b""), CastNameError, "foreign_prefix"),
        (lambda: cache.publish("abc", b""), CastNameError, "bad_name"),
        (lambda: cache.publish("abc/m/1", b"x" * 1001), CacheError, "too_large"),
        (lambda: cache.publish("abc/m/1", "text"), CacheError, "bad_data"),
        (lambda: cache.publish("abc/m/1", b"", id=b"short"), ValueError, None),
        (lambda: cache.publish("abc/m/1", b"", recipients=["a b"]), CastNameError, "bad_name"),
        (lambda: cache.publish("abc/m/1", b"", publisher="p" * 129), CastNameError, "bad_name"),
    ]
    for call, error, reason in cases:
        with pytest.raises(error) as caught:
            call()
        if reason:
            assert caught.value.reason == reason
    assert cache.pending == 0 and cache.stats()["messages"] == 0
    cache.close()
    with pytest.raises(CacheError, match="closed"):
        cache.publish("abc/m/1", b"")


def test_read_filters_by_pattern_split_and_recipient_estate(tmp_path):
    cache, _ = virtual_cache(tmp_path)
    make = IdMaker()
    published = []
    for i in range(40):
        recipients = [["bob@xyz"], ["xyz"], ["carol@qrs"], None][i % 4]
        t = cache.publish(f"abc/m/{['alice', 'dave'][i % 2]}/{i}", b"%d" % i, id=make(), publisher="p%d" % (i % 3),
                          recipients=recipients)
        published.append((t, recipients))
    cache.flush()
    alice = read_all(cache, pattern="abc/m/alice/*")
    assert [m.seq for m in alice] == [t.seq for t, _ in published if "alice" in t.name]
    to_xyz = read_all(cache, to="xyz")
    assert [m.seq for m in to_xyz] == [t.seq for t, r in published if r is None or r in (["bob@xyz"], ["xyz"])]
    assert all(m.recipients in (None, ("bob@xyz",), ("xyz",)) for m in to_xyz)
    halves = [read_all(cache, split=("id", 3, k)) for k in range(3)]
    seqs = sorted(m.seq for half in halves for m in half)
    assert seqs == list(range(1, 41)) and all(halves)
    by_publisher = [read_all(cache, split=("publisher", 2, k)) for k in range(2)]
    assert not {m.publisher for m in by_publisher[0]} & {m.publisher for m in by_publisher[1]}
    cache.close()


def test_read_limits_and_upto(tmp_path):
    cache, _ = virtual_cache(tmp_path)
    for i in range(100):
        cache.publish(f"abc/{'a' if i < 90 else 'b'}/{i}", b"x" * 100)
    cache.flush()
    first = cache.read(0, limit=10)
    assert [m.seq for m in first] == list(range(1, 11)) and first.upto == 10
    small = cache.read(0, max_bytes=250)
    assert len(small) == 2 and small.upto == 2  # 106 bytes counted each
    big = cache.read(0, max_bytes=1)
    assert len(big) == 1  # one message always fits, however large
    rare = cache.read(0, pattern="abc/b/*", limit=5)
    assert [m.seq for m in rare] == [91, 92, 93, 94, 95] and rare.upto == 95
    none = cache.read(0, pattern="abc/c/*", limit=1)
    assert none == [] and none.upto == 100  # scanned to the end: the subscription moves on
    assert cache.read(100) == [] and cache.read(100).upto == 100
    cache.close()


def test_state_survives_reopening(tmp_path):
    cache, clock = virtual_cache(tmp_path)
    ids = [publish_now(cache, f"abc/m/{i}", b"d").id for i in range(3)]
    cache.close()
    again, _ = virtual_cache(tmp_path, clock=clock)
    assert again.high_seq == 3 and again.low_seq == 1 and again.stats()["bytes"] == 3 * (1 + 7 + 16)
    assert publish_now(again, "abc/m/0", b"d", id=ids[0]).duplicate
    assert publish_now(again, "abc/m/3", b"d").seq > 3  # increasing; a duplicate may use a seq up
    again.close()


def test_seqs_are_never_reused_after_everything_expired(tmp_path):
    cache, clock = virtual_cache(tmp_path)
    publish_now(cache, "abc/m/1", b"d")
    clock.advance_to(DAY + 700)
    cache.expire()
    cache.flush()
    cache.close()
    again, _ = virtual_cache(tmp_path, clock=clock)
    assert again.high_seq == 1 and publish_now(again, "abc/m/2", b"d").seq == 2
    again.close()


def test_a_house_scheduler_completes_tickets_when_the_writer_wakes_it(tmp_path):
    # Real clock, writer thread: the ticket completes inside the scheduler's loop,
    # woken through the socket pair; the loop ends on the ticket, not on a sleep.
    clock = RealClock()
    scheduler = Scheduler(clock)
    cache = Cache.open(tmp_path / "c.sqlite3", estate="abc", clock=clock, scheduler=scheduler)
    seen = []
    cache.listen(lambda tickets: seen.extend(t.seq for t in tickets))
    ticket = cache.publish("abc/m/1", b"hello")
    ticket.add_done(lambda t: scheduler.stop())
    scheduler.run(until=clock.now() + 30)
    assert ticket.ok and ticket.seq == 1 and seen == [1]
    assert scheduler.waits < 1000  # it blocked in the selector, it did not spin
    cache.close()
    scheduler.close()


def test_a_simulated_house_writes_inline_and_expires_on_its_clock(tmp_path):
    from flowcast.runtime.clock import VirtualClock

    clock = VirtualClock()
    scheduler = Scheduler(clock)
    cache = Cache.open(tmp_path / "c.sqlite3", estate="abc", clock=clock, scheduler=scheduler, expire_every=600)
    done = []
    cache.publish("abc/m/1", b"x").add_done(done.append)
    scheduler.run(until=1.0)
    assert done and done[0].seq == 1 and clock.now() == 1.0
    scheduler.run(until=25 * HOUR)  # the periodic expiry timer runs on the virtual clock
    assert cache.stats()["messages"] == 0 and cache.stats()["expired"] == 1
    cache.close()
    scheduler.close()


def test_a_failing_callback_does_not_strand_other_tickets(tmp_path):
    cache, _ = virtual_cache(tmp_path)
    first, second = cache.publish("abc/m/1", b"x"), cache.publish("abc/m/2", b"y")
    first.add_done(lambda t: 1 / 0)
    cache.flush()
    assert first.ok and second.ok
    cache.close()


def test_too_many_publishes_waiting_for_the_disk_get_back_pressure(tmp_path):
    cache, _ = virtual_cache(tmp_path, max_pending=3)  # inline writer: nothing commits until flushed
    taken = [cache.publish(f"abc/m/{i}", b"x") for i in range(3)]
    with pytest.raises(CacheError) as caught:
        cache.publish("abc/m/3", b"x")
    assert caught.value.reason == "busy" and "retry" in str(caught.value)
    cache.flush()
    assert all(t.ok for t in taken) and cache.publish("abc/m/3", b"x") is not None
    cache.flush()
    assert len(read_all(cache)) == 4
    cache.close()


def test_a_writer_bug_refuses_the_batch_instead_of_stranding_it(tmp_path, monkeypatch):
    cache, _ = virtual_cache(tmp_path)
    monkeypatch.setattr(cache._writes, "publish", lambda jobs: 1 / 0)
    ticket = cache.publish("abc/m/1", b"x")
    cache.flush()
    assert ticket.done and isinstance(ticket.error, CacheError) and "ZeroDivisionError" in str(ticket.error)
    monkeypatch.undo()
    assert publish_now(cache, "abc/m/2", b"y").ok
    cache.close()


def test_the_writer_never_sleeps_through_a_publish(tmp_path):
    # Each publish finds the writer asleep or about to sleep: the hand-off
    # without a lock must wake it every time (a lost wake-up is a flush timeout).
    cache = Cache.open(tmp_path / "c.sqlite3", estate="abc")
    try:
        for i in range(2000):
            ticket = cache.publish(f"abc/m/{i}", b"x")
            cache.flush(10.0)
            assert ticket.ok
    finally:
        cache.close()


def test_a_house_publishing_many_gets_every_ticket_from_its_loop(tmp_path):
    clock = RealClock()
    scheduler = Scheduler(clock)
    cache = Cache.open(tmp_path / "c.sqlite3", estate="abc", clock=clock, scheduler=scheduler)
    tickets = []
    done = []

    def publisher():
        for i in range(5000):
            tickets.append(cache.publish(f"abc/m/{i}", b"x" * 100))
            if i % 100 == 0:
                yield  # a flow publishes across rounds

    def finished(tickets_done):
        done.extend(tickets_done)
        if len(done) == 5000:
            scheduler.stop()

    cache.listen(finished)
    scheduler.spawn(publisher())
    scheduler.run(until=clock.now() + 60)
    assert len(done) == 5000 and all(t.ok for t in tickets)
    assert [t.seq for t in tickets] == sorted(t.seq for t in tickets)  # one publisher, seq order
    cache.close()
    scheduler.close()


def test_a_bad_read_is_refused_with_a_reason(tmp_path):
    cache, _ = virtual_cache(tmp_path)
    publish_now(cache, "abc/m/1", b"x")
    for kwargs, reason in (({"after": -1}, "bad_cursor"), ({"after": "5"}, "bad_cursor"), ({"after": 1.5}, "bad_cursor"),
                           ({"after": 0, "limit": 0}, "bad_read"), ({"after": 0, "max_bytes": -5}, "bad_read")):
        with pytest.raises(CacheError) as caught:
            cache.read(**kwargs)
        assert caught.value.reason == reason
    for bad in ({"after": 0, "pattern": "abc/**/x"}, {"after": 0, "split": ("id", 0, 0)}):
        with pytest.raises(CastNameError):
            cache.read(**bad)
    assert len(cache.read(0)) == 1  # and it still reads
    cache.close()
