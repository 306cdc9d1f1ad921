"""The small stores (inbox, causal ledger, contacts) refuse a damaged file and leave it as it was.

Before: an empty file was taken by SQLite for an empty database, so an empty
inbox became a new one and the whole cache was delivered a second time.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from flowcast.cast.contacts import Contacts, ContactsCorrupt
from flowcast.cast.inbox import Inbox, InboxCorrupt
from flowcast.causal.ledger import Ledger, LedgerCorrupt
from flowcast.errors import DamagedFile

STORES = [
    pytest.param(Inbox, InboxCorrupt, "inbox.sqlite3", id="inbox"),
    pytest.param(Ledger, LedgerCorrupt, "causal.sqlite3", id="ledger"),
    pytest.param(Contacts, ContactsCorrupt, "contacts.sqlite3", id="contacts"),
]


def _files(path: Path) -> dict[str, bytes]:
    """The store and its WAL, byte for byte, and the names beside it.

    The ``-shm`` file's bytes are SQLite's shared-memory scratch (readers
    mark their slots in it); its content is rebuilt from the WAL.
    """
    return {p.name: b"" if p.name.endswith("-shm") else p.read_bytes()
            for p in sorted(path.parent.iterdir()) if p.name.startswith(path.name)}


def _refused(store, error, path: Path, words: str) -> DamagedFile:
    before = _files(path)
    with pytest.raises(error) as caught:
        store(path)
    assert isinstance(caught.value, DamagedFile) and caught.value.path == path
    text = str(caught.value)
    assert str(path) in text and words in text and "\n" not in text
    assert _files(path) == before, "a refused store was changed, or files were added beside it"
    return caught.value


@pytest.mark.parametrize("store, error, name", STORES)
def test_an_empty_file_is_refused_not_taken_for_a_new_store(tmp_path, store, error, name):
    path = tmp_path / name
    path.write_bytes(b"")
    _refused(store, error, path, "empty (0 bytes)")
    assert path.stat().st_size == 0


@pytest.mark.parametrize("store, error, name", STORES)
def test_garbage_is_refused(tmp_path, store, error, name):
    path = tmp_path / name
    path.write_bytes(os.urandom(9000))
    _refused(store, error, path, "SQLite cannot")


@pytest.mark.parametrize("store, error, name", STORES)
def test_another_database_is_refused(tmp_path, store, error, name):
    path = tmp_path / name
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE notes(x)")
    db.commit()
    db.close()
    _refused(store, error, path, "no meta table")


@pytest.mark.parametrize("store, error, name", STORES)
def test_a_meta_table_without_its_format_row_is_refused(tmp_path, store, error, name):
    path = tmp_path / name
    store(path).close()
    db = sqlite3.connect(path)
    db.execute("DELETE FROM meta WHERE key='format'")
    db.commit()
    db.close()
    _refused(store, error, path, "no format row")


@pytest.mark.parametrize("store, error, name", STORES)
def test_another_format_is_refused_and_its_wal_left_alone(tmp_path, store, error, name):
    path = tmp_path / name
    store(path).close()
    writer = sqlite3.connect(path, isolation_level=None)  # kept open: its WAL stays beside the file
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("UPDATE meta SET value='99' WHERE key='format'")
    try:
        assert (tmp_path / f"{name}-wal").stat().st_size > 0
        _refused(store, error, path, "format is '99'")
    finally:
        writer.close()


@pytest.mark.parametrize("store, error, name", STORES)
def test_a_directory_in_its_place_is_refused(tmp_path, store, error, name):
    path = tmp_path / name
    path.mkdir()
    with pytest.raises(error, match="not a regular file"):
        store(path)
    assert path.is_dir() and not any(path.iterdir())


@pytest.mark.parametrize("store, error, name", STORES)
def test_a_missing_file_is_a_new_store_made_whole(tmp_path, store, error, name):
    path = tmp_path / "deep" / name
    opened = store(path)
    opened.close()
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(".")] == []  # no temporary left
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("SELECT count(*) FROM meta WHERE key='format'").fetchone()[0] == 1
    db.close()
    store(path).close()  # and it opens again


_KILLED_WRITER = """
import os, sys
from flowcast.cast.inbox import Inbox
inbox = Inbox(sys.argv[1])
inbox.add(b"s" * 16, "key", 0)
inbox.commit(b"s" * 16, 42, [(b"i" * 16, 1e12)])
os.kill(os.getpid(), 9)
"""


def test_an_inbox_left_with_its_wal_by_kill_9_is_not_taken_for_a_damaged_one(tmp_path):
    path = tmp_path / "inbox.sqlite3"
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(path)], env=env, cwd=root, timeout=60)
    assert done.returncode == -9
    assert (tmp_path / "inbox.sqlite3-wal").stat().st_size > 0  # what it committed is in the WAL only
    inbox = Inbox(path)
    try:
        assert inbox.find("key") == (b"s" * 16, 42)
        assert inbox.seen(b"s" * 16, [b"i" * 16]) == {b"i" * 16}
    finally:
        inbox.close()
