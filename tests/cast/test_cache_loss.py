"""A cache that lost committed messages finds out on start and refuses, instead of serving a shorter history.

Before the high-water mark, the WAL of a cache killed with kill -9 and cut in
half (or to zero) opened as a good cache with 1,501 (or 0) of 3,000
acknowledged messages, and said nothing; an older copy restored over the file
likewise.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from flowcast.cast import Cache, CacheLost
from flowcast.cast.cachemark import mark_path, read_mark

from .cachekit import read_all

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
COUNT = 3000


def _killed_after(path: Path, count: int) -> None:
    """A child commits ``count`` messages to the cache at ``path`` and is killed with kill -9 once its mark has them."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    child = subprocess.Popen([sys.executable, "-m", "tests.cast.cache_loss_child", str(path), str(count)], cwd=ROOT, env=env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == f"acked {count}"
        # The mark follows the commits within its period (1 s) once the writer is idle: wait for it, bounded.
        deadline = 200
        while read_mark(path, "abc") != count and deadline:
            deadline -= 1
            try:
                child.wait(0.05)
            except subprocess.TimeoutExpired:
                pass
        assert read_mark(path, "abc") == count, "the high-water mark never caught up with the commits"
        assert child.poll() is None
    finally:
        child.kill()  # SIGKILL: no close, no checkpoint
        child.wait(10)
        child.stdin.close()
        child.stdout.close()


def _files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.parent.iterdir())
            if p.name.startswith(path.name) and not p.name.endswith("-shm")}


def _what_sqlite_sees(path: Path, scratch: Path) -> int:
    """How many messages the damaged files hold, read from a copy (SQLite would checkpoint the original)."""
    scratch.mkdir()
    for name in (path.name, path.name + "-wal"):
        if (path.parent / name).exists():
            shutil.copy(path.parent / name, scratch / name)
    db = sqlite3.connect(scratch / path.name)
    try:
        return db.execute("SELECT count(*) FROM messages").fetchone()[0]
    finally:
        db.close()


@pytest.mark.parametrize("cut", [0.5, 0.0], ids=["wal-half", "wal-zero"])
def test_a_wal_cut_after_kill_9_is_found_and_refused_left_as_it_was(tmp_path, cut):
    path = tmp_path / "cache.sqlite3"
    _killed_after(path, COUNT)
    wal = Path(f"{path}-wal")
    assert wal.stat().st_size > 0
    os.truncate(wal, int(wal.stat().st_size * cut))
    left = _what_sqlite_sees(path, tmp_path / "copy")
    assert left < COUNT  # the loss is real: a plain open would serve this many as the whole history
    before = _files(path)
    with pytest.raises(CacheLost) as caught:
        Cache.open(path, estate="abc")
    text = str(caught.value)
    assert str(path) in text and f"says seq {COUNT} was committed" in text and "lost committed messages" in text
    assert caught.value.marked == COUNT and caught.value.high < COUNT and "\n" not in text
    with pytest.raises(CacheLost):
        Cache.open(path, estate="abc", readonly=True)  # flowcast cast stats says so too
    assert _files(path) == before, "a refused cache or its WAL was changed"


def test_accepting_the_loss_serves_what_is_left_says_the_gap_and_never_reuses_a_seq(tmp_path):
    path = tmp_path / "cache.sqlite3"
    _killed_after(path, COUNT)
    wal = Path(f"{path}-wal")
    os.truncate(wal, wal.stat().st_size // 2)
    cache = Cache.open(path, estate="abc", accept_loss=True)
    try:
        survivors = read_all(cache)
        high = max((m.seq for m in survivors), default=0)
        assert len(survivors) == high < COUNT and cache.high_seq == COUNT
        tail = cache.read(high)
        assert list(tail) == [] and list(tail.damaged) == [COUNT]  # the publisher turns this into a cast.gap
        ticket = cache.publish("abc/m/alice/after", b"y")
        cache.flush()
        assert ticket.seq == COUNT + 1  # a subscriber whose cursor passed the loss skips nothing new
    finally:
        cache.close()
    assert read_mark(path, "abc") == COUNT + 1
    Cache.open(path, estate="abc").close()  # accepted once: a plain open again


def test_an_older_copy_restored_over_the_cache_is_refused(tmp_path):
    path = tmp_path / "cache.sqlite3"
    cache = Cache.open(path, estate="abc")
    for i in range(1000):
        cache.publish(f"abc/m/{i}", b"a" * 50)
    cache.close()
    shutil.copy(path, tmp_path / "backup")
    cache = Cache.open(path, estate="abc")
    for i in range(500):
        cache.publish(f"abc/m/later/{i}", b"b" * 50)
    cache.close()
    assert read_mark(path, "abc") == 1500  # a clean close records all it committed
    shutil.copy(tmp_path / "backup", path)
    with pytest.raises(CacheLost, match="says seq 1500 was committed, but it ends at seq 1000"):
        Cache.open(path, estate="abc")


def test_a_cache_moved_aside_without_its_mark_is_refused_a_new_one_with_neither_is_made(tmp_path):
    path = tmp_path / "cache.sqlite3"
    cache = Cache.open(path, estate="abc")
    cache.publish("abc/m/1", b"a")
    cache.close()
    path.rename(tmp_path / "aside.sqlite3")
    with pytest.raises(CacheLost, match="it is missing, but its high-water mark"):
        Cache.open(path, estate="abc")
    assert not path.exists()
    mark_path(path).rename(tmp_path / "aside.sqlite3.hwm")
    Cache.open(path, estate="abc").close()  # nothing beside it says anything was committed here
    assert read_mark(path, "abc") == 0


@pytest.mark.parametrize("mark", [b"", b"{not json", json.dumps({"format": "flowcast-cast-hwm-1", "estate": "xyz", "high": 3}).encode()])
def test_a_damaged_or_foreign_mark_is_refused_and_left_as_it_was(tmp_path, mark):
    path = tmp_path / "cache.sqlite3"
    Cache.open(path, estate="abc").close()
    mark_path(path).write_bytes(mark)
    with pytest.raises(CacheLost.__mro__[1], match="high-water mark"):  # CacheCorrupt, not a loss
        Cache.open(path, estate="abc")
    assert mark_path(path).read_bytes() == mark


def test_the_mark_is_never_ahead_of_the_commits_and_costs_no_fsync_per_commit(tmp_path):
    path = tmp_path / "cache.sqlite3"
    cache = Cache.open(path, estate="abc", mark_every=3600.0)  # no period passes during the test
    try:
        for i in range(5):
            for j in range(100):
                cache.publish(f"abc/m/{i}/{j}", b"z")
            cache.flush()
            marked = read_mark(path, "abc")
            assert marked is not None and marked <= cache.high_seq
        assert cache._writes.marker.writes == 0 and read_mark(path, "abc") == 0  # 5 commits, no mark write
    finally:
        cache.close()
    assert read_mark(path, "abc") == 500  # the close records it


def test_a_subscriber_cursor_past_the_end_is_reported_as_a_possible_loss(tmp_path, caplog):
    import logging

    from flowcast.cast.cachemark import write_mark

    from .kit import Cast

    first = Cast(tmp_path)
    first.publish_many(20)
    sub = first.service().subscribe("abc/messages/**", estate="abc", into="inbox")
    assert first.run_until(lambda: sub.cursor == 20, 20)
    first.cache.close()
    # A loss the mark could not see (the last second before a crash): the cache ends at 10, its mark says 10.
    db = sqlite3.connect(tmp_path / "abc" / "cast" / "cache.sqlite3")
    db.execute("DELETE FROM messages WHERE seq > 10")
    db.execute("UPDATE sqlite_sequence SET seq = 10 WHERE name = 'messages'")
    db.commit()
    db.close()
    write_mark(tmp_path / "abc" / "cast" / "cache.sqlite3", "abc", 10)
    caplog.set_level(logging.ERROR, logger="flowcast.cast.publisher")
    again = Cast(tmp_path, cache=first.cache)
    resumed = again.service().subscribe("abc/messages/**", estate="abc", into="inbox")
    assert resumed.cursor == 20  # from its inbox
    assert again.run_until(lambda: resumed.state == "refused", 20)
    assert "cursor_future" in resumed.error and again.pub.publisher.counts["cursor_past_end"] >= 1
    assert any("past this cache's end (seq 10): the cache may have lost committed messages" in r.getMessage()
               for r in caplog.records)
