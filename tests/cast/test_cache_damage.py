"""Flipped bytes inside stored payloads: those messages are reported and never served, the others are.

The file is damaged while the cache is closed, where SQLite's structure
check cannot see it (``PRAGMA quick_check`` passes): before the per-message
checksum, every altered message was served as a good one.
"""

from __future__ import annotations

import logging
import os
import random
import sqlite3
from pathlib import Path

import pytest

from flowcast.cast import Cache, CacheCorrupt

from .cachekit import read_all
from .kit import Cast, payloads

COUNT = 200


def _filled(path: Path, count: int = COUNT) -> dict[int, bytes]:
    """A closed cache of ``count`` messages, each with a payload found nowhere else in the file: seq -> data."""
    cache = Cache.open(path, estate="abc")
    tickets = [(cache.publish(f"abc/messages/alice/{i}", data, publisher="alice"), data)
               for i, data in enumerate(os.urandom(300) for _ in range(count))]
    cache.flush()
    cache.close()  # checkpointed: every payload is in the main file
    return {ticket.seq: data for ticket, data in tickets}


def _flip(path: Path, payloads: list[bytes], rng: random.Random) -> None:
    """Flip one byte inside each of ``payloads`` where it lies in the closed database file."""
    raw = bytearray(path.read_bytes())
    for data in payloads:
        at = raw.find(data)
        assert at >= 0 and raw.find(data, at + 1) < 0
        raw[at + rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("damaged", [1, 2, 5, 10])
def test_flipped_payloads_are_reported_never_served_and_the_rest_is(tmp_path, damaged, caplog):
    path = tmp_path / "cache.sqlite3"
    stored = _filled(path)
    rng = random.Random(damaged)
    bad = sorted(rng.sample(sorted(stored), damaged))
    _flip(path, [stored[seq] for seq in bad], rng)
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA quick_check").fetchone()[0] == "ok"  # structure intact: only the checksum can tell
    db.close()
    caplog.set_level(logging.ERROR, logger="flowcast.cast.cache")
    cache = Cache.open(path, estate="abc")
    heard: list[int] = []
    cache.on_damaged(heard.append)
    try:
        served = read_all(cache)
        assert {m.seq: m.data for m in served} == {seq: data for seq, data in stored.items() if seq not in bad}
        again = read_all(cache, pattern="abc/messages/**")  # a second pass serves the same, says nothing new
        assert [m.seq for m in again] == [m.seq for m in served]
        got = cache.get(sorted(stored))
        assert sorted(got) == sorted(set(stored) - set(bad)) and all(got[s].data == stored[s] for s in got)
        assert heard == bad and cache.stats()["damaged"] == damaged
        lines = [r.getMessage() for r in caplog.records if "is damaged" in r.getMessage()]
        assert len(lines) == damaged and all(str(path) in line for line in lines)
    finally:
        cache.close()


def test_a_read_gives_messages_or_damaged_seqs_in_stream_order_never_both(tmp_path):
    path = tmp_path / "cache.sqlite3"
    stored = _filled(path, 20)
    _flip(path, [stored[5], stored[6], stored[12]], random.Random(3))
    cache = Cache.open(path, estate="abc")
    try:
        reads = []
        after = 0
        for _ in range(50):
            read = cache.read(after)
            if read.upto == after:
                break
            reads.append(([m.seq for m in read], list(read.damaged), read.upto))
            after = read.upto
        assert reads == [([1, 2, 3, 4], [], 4), ([], [5, 6], 6), ([7, 8, 9, 10, 11], [], 11), ([], [12], 12),
                         ([13, 14, 15, 16, 17, 18, 19, 20], [], 20)]
    finally:
        cache.close()


def test_a_subscriber_gets_a_gap_over_each_damaged_seq_and_every_other_message_once(tmp_path):
    first = Cast(tmp_path)
    tickets = first.publish_many(100)
    first.cache.close()
    bad = [17, 18, 60]
    path = tmp_path / "abc" / "cast" / "cache.sqlite3"
    raw = bytearray(path.read_bytes())
    for seq in bad:  # publish_many's payloads: b"m%06d"
        at = raw.find(b"m%06d" % (seq - 1))
        assert at >= 0
        raw[at + 3] ^= 0x10
    path.write_bytes(bytes(raw))
    cast = Cast(tmp_path, cache=first.cache)  # the estate restarted on the damaged file
    damaged_heard: list[int] = []
    cast.pub.publisher.hooks.add("damaged", damaged_heard.append)
    sub = cast.service().subscribe("abc/messages/**", estate="abc", into="inbox")
    inbox = cast.queue()
    assert cast.run_until(lambda: sub.cursor == 100, 20)
    cast.world.run_for(5)  # renews resend nothing more
    assert payloads(inbox) == [b"m%06d" % (t.seq - 1) for t in tickets if t.seq not in bad]
    stream = [(item["tag"], item["seq"] if item["tag"] == "cast" else (item["data"]["from"], item["data"]["upto"]))
              for item in inbox.queue]
    assert stream[16:19] == [("cast.gap", (17, 18)), ("cast", 19), ("cast", 20)]
    assert stream[57:60] == [("cast", 59), ("cast.gap", (60, 60)), ("cast", 61)]
    assert sub.gaps == [(17, 18), (60, 60)] and len(inbox.queue) == 97 + 2
    counts = cast.pub.publisher.counts
    assert counts["damaged"] == 3 and counts["gaps_damaged"] == 2 and damaged_heard == bad
    assert cast.pub.status()["publisher"]["damaged"] == 3


def test_a_cache_of_the_format_without_checksums_is_refused(tmp_path):
    path = tmp_path / "cache.sqlite3"
    Cache.open(path, estate="abc").close()
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value='flowcast-cast-cache-1' WHERE key='format'")
    db.commit()
    db.close()
    before = path.read_bytes()
    with pytest.raises(CacheCorrupt, match="without per-message checksums; it is not migrated"):
        Cache.open(path, estate="abc")
    assert path.read_bytes() == before
