"""The inbox's owed messages, packed one row per subscription per commit: what each acknowledgement leaves owed.

The hand-off's promise (tests/cast/test_kill9_handoff.py) rests on
``Inbox.owed`` after a restart being exactly what was not acknowledged;
these cases reach the paths packing added: a range through the middle of a
pack, acknowledgements out of order, a pack done one by one, and a file
written with one row per message.
"""

from __future__ import annotations

from pathlib import Path

from flowcast.cast.inbox import Inbox, Owed

SID, OTHER = b"s" * 16, b"o" * 16


def _rows(sid: bytes, seqs: range) -> list[Owed]:
    return [(sid, seq, "cast", seq.to_bytes(16, "big"), "abc/m", "alice", 1.0, b"x%d" % seq, None) for seq in seqs]


def _commit(inbox: Inbox, *owed: list[Owed], acks=(), ranges=None) -> None:
    rows = [row for group in owed for row in group]
    cursors = {row[0]: row[1] for row in rows}
    inbox.commit_many(cursors, [(row[0], row[3], 1e12) for row in rows], rows, acks, ranges)


def _seqs(inbox: Inbox, sid: bytes = SID) -> list[int]:
    return [row[1] for row in inbox.owed(sid)]


def _packs(inbox: Inbox) -> int:
    return int(inbox.db.execute("SELECT count(*) FROM owedpack").fetchone()[0])


def test_a_range_through_a_pack_leaves_exactly_what_follows_it_after_a_restart(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "inbox.sqlite3")
    _commit(inbox, _rows(SID, range(1, 11)), _rows(OTHER, range(1, 4)))
    _commit(inbox, _rows(SID, range(11, 21)), ranges={SID: 14})
    inbox.close()
    inbox = Inbox(tmp_path / "inbox.sqlite3")
    assert _seqs(inbox) == list(range(15, 21))
    assert _seqs(inbox, OTHER) == [1, 2, 3]  # another subscription's range is its own
    assert inbox.owed(SID)[0] == _rows(SID, range(15, 16))[0]  # every column back as it went in
    assert _packs(inbox) == 2  # the first pack went whole; the one the range cut stays (the floor hides its head), and OTHER's


def test_out_of_order_acknowledgements_are_remembered_and_a_done_pack_goes(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "inbox.sqlite3")
    _commit(inbox, _rows(SID, range(1, 6)))
    inbox.settle([(SID, 5), (SID, 2)])
    assert _seqs(inbox) == [1, 3, 4]
    inbox.settle([(SID, 1), (SID, 3), (SID, 4)])
    assert _seqs(inbox) == [] and _packs(inbox) == 0
    assert inbox.db.execute("SELECT count(*) FROM unowed").fetchone()[0] == 0


def test_a_pack_finished_by_a_range_and_single_acks_together(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "inbox.sqlite3")
    _commit(inbox, _rows(SID, range(1, 11)))
    inbox.settle([], ranges={SID: 4})
    inbox.settle([(SID, 7), (SID, 9)])
    assert _seqs(inbox) == [5, 6, 8, 10]
    inbox.settle([(SID, 5), (SID, 6), (SID, 8), (SID, 10)])
    assert _seqs(inbox) == [] and _packs(inbox) == 0


def test_rows_of_a_file_written_one_per_message_are_still_owed_and_acknowledged(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "inbox.sqlite3")
    inbox.db.executemany("INSERT INTO owed VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)", _rows(SID, range(1, 4)))
    _commit(inbox, _rows(SID, range(4, 6)))
    assert _seqs(inbox) == [1, 2, 3, 4, 5] and inbox.owed_count() == 5
    inbox.settle([(SID, 2)], ranges=None)
    assert _seqs(inbox) == [1, 3, 4, 5]
    inbox.settle([], ranges={SID: 4})
    assert _seqs(inbox) == [5]
