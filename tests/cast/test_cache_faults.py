"""The cache under faults: kill -9 mid-stream, corrupt files, a full disk, a reader beside a writer."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flowcast.cast import Cache, CacheCorrupt, CacheError

from .cachekit import publish_now, read_all

HERE = Path(__file__).resolve().parent


def test_every_acknowledged_publish_survives_kill_9(tmp_path):
    path = tmp_path / "cache.sqlite3"
    env = dict(os.environ)
    root = str(HERE.parents[1])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.cast.cache_child", str(path), "2000000"],
        cwd=root, env=env, stdout=subprocess.PIPE, text=True,
    )
    acked: list[str] = []
    deadline = time.monotonic() + 60
    try:
        while len(acked) < 20_000 and time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            acked.append(line.strip())
        assert child.poll() is None, "the publisher ended before it was killed"
        os.kill(child.pid, signal.SIGKILL)  # mid-stream: transactions in flight
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(10)
        child.stdout.close()
    # acknowledgements printed before the kill but not yet read are acknowledged too
    assert len(acked) >= 1_000, f"only {len(acked)} acknowledgements in 60 s"
    cache = Cache.open(path, estate="abc")
    try:
        stored = {bytes(r[0]).hex() for r in cache._reader.execute("SELECT id FROM messages")}
        missing = [i for i in acked if i not in stored]
        assert not missing, f"{len(missing)} of {len(acked)} acknowledged publishes were lost"
        assert len(stored) >= len(acked)
        again = publish_now(cache, "abc/m/alice/0", b"x" * 100, id=bytes.fromhex(acked[0]))
        assert again.duplicate  # and the ids still dedupe after the crash
    finally:
        cache.close()


def _a_real_cache(path: Path, estate: str = "abc", count: int = 2000) -> None:
    cache = Cache.open(path, estate=estate)
    for i in range(count):
        cache.publish(f"{estate}/m/{i}", os.urandom(200))
    cache.flush()
    cache.close()


def _refused(path: Path, estate: str = "abc", words: str = "") -> CacheCorrupt:
    before = path.read_bytes()
    with pytest.raises(CacheCorrupt) as caught:
        Cache.open(path, estate=estate)
    assert str(path) in str(caught.value) and caught.value.path == path
    assert words in str(caught.value)
    assert path.read_bytes() == before, "a broken cache was changed or replaced"
    return caught.value


def test_garbage_bytes_are_refused_never_replaced(tmp_path):
    path = tmp_path / "cache.sqlite3"
    path.write_bytes(os.urandom(8192))
    _refused(path, words="SQLite cannot read it")


def test_an_empty_file_is_refused_not_taken_for_a_new_cache(tmp_path):
    path = tmp_path / "cache.sqlite3"
    path.write_bytes(b"")
    _refused(path, words="it is empty (0 bytes)")


def test_a_truncated_database_is_refused(tmp_path):
    path = tmp_path / "cache.sqlite3"
    _a_real_cache(path)
    size = path.stat().st_size
    assert size > 100_000
    with open(path, "r+b") as f:
        f.truncate(size // 2)
    _refused(path)


def test_a_damaged_page_is_refused(tmp_path):
    path = tmp_path / "cache.sqlite3"
    _a_real_cache(path)
    with open(path, "r+b") as f:  # scribble over pages in the middle, keep the header and the meta page
        f.seek(path.stat().st_size // 2)
        f.write(os.urandom(16384))
    _refused(path)


def test_the_cache_of_another_estate_is_refused(tmp_path):
    path = tmp_path / "cache.sqlite3"
    _a_real_cache(path, estate="xyz", count=3)
    _refused(path, estate="abc", words="estate 'xyz', not of 'abc'")


def test_another_sqlite_database_is_refused(tmp_path):
    path = tmp_path / "cache.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes(x)")
    conn.commit()
    conn.close()
    _refused(path, words="no meta table")
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT)")
    conn.execute("INSERT INTO meta VALUES ('format', 'flowcast-cast-cache-0'), ('estate', 'abc')")
    conn.commit()
    conn.close()
    _refused(path, words="format")


def test_a_missing_file_is_a_new_cache(tmp_path):
    path = tmp_path / "deep" / "cast" / "cache.sqlite3"
    cache = Cache.open(path, estate="abc")
    assert path.exists() and cache.stats()["messages"] == 0
    assert cache._reader.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert cache._writes.conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    cache.close()


@contextlib.contextmanager
def _small_disk(tmp_path: Path):
    """A directory on a 1 MiB tmpfs (a real ENOSPC) when this process may mount, else None."""
    where = tmp_path / "small"
    where.mkdir()
    mounted = False
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)],
                                 capture_output=True).returncode == 0
    try:
        yield where if mounted else None
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _fill_until_refused(cache: Cache) -> tuple[list, list]:
    ok, refused = [], []
    for i in range(4000):
        ticket = cache.publish(f"abc/m/{i}", os.urandom(1000))
        cache.flush()
        (ok if ticket.ok else refused).append(ticket)
        if refused:
            break
    return ok, refused


def test_a_full_disk_refuses_the_publish_and_the_cache_still_reads(tmp_path):
    # A real full disk (a 1 MiB tmpfs) where this process may mount one; else
    # SQLite's own SQLITE_FULL through PRAGMA max_page_count, the same error path.
    with _small_disk(tmp_path) as small:
        if small is not None:
            filler = small / "filler"
            filler.write_bytes(b"\0" * (256 << 10))  # given back once the disk is full
            cache = Cache.open(small / "cache.sqlite3", estate="abc")
        else:
            filler = None
            cache = Cache.open(tmp_path / "cache.sqlite3", estate="abc")
            cache._writes.conn.execute("PRAGMA max_page_count = 120")
        try:
            ok, refused = _fill_until_refused(cache)
            assert ok and refused, "the disk never filled"
            error = refused[0].error
            assert isinstance(error, CacheError) and error.reason == "io_error"
            assert "full" in str(error) and str(cache.path) in str(error)
            assert [m.seq for m in read_all(cache)] == [t.seq for t in ok]  # reads go on, nothing lost
            assert cache.stats()["messages"] == len(ok)
            # room again: publishes are taken again (the writer did not stop for good)
            if filler is None:
                cache._writes.conn.execute("PRAGMA max_page_count = 1000000")
            else:
                filler.unlink()
            again = cache.publish("abc/m/again", b"x" * 10)
            cache.flush()
            assert again.ok, again.error
            assert [m.seq for m in read_all(cache)] == [t.seq for t in ok] + [again.seq]
        finally:
            cache.close()


def test_a_read_only_open_reads_while_the_estate_writes(tmp_path):
    path = tmp_path / "cache.sqlite3"
    writer = Cache.open(path, estate="abc")
    first = [writer.publish(f"abc/m/{i}", b"a") for i in range(100)]
    writer.flush()
    reader = Cache.open(path, estate="abc", readonly=True)
    try:
        assert reader.stats()["messages"] == 100 and reader.high_seq == first[-1].seq
        more = [writer.publish(f"abc/m/x{i}", b"b") for i in range(100)]  # the estate goes on writing
        writer.flush()
        assert len(read_all(reader)) == 200 and reader.low_seq == 1
        with pytest.raises(CacheError) as caught:
            reader.publish("abc/m/1", b"c")
        assert caught.value.reason == "read_only"
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            reader._reader.execute("DELETE FROM messages")
        assert all(t.ok for t in more)
    finally:
        reader.close()
        writer.close()


def test_a_read_only_open_never_creates_a_cache(tmp_path):
    with pytest.raises(CacheError, match="no CAST cache"):
        Cache.open(tmp_path / "none.sqlite3", estate="abc", readonly=True)
    assert not (tmp_path / "none.sqlite3").exists()
