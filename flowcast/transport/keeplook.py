"""A running keep's looks at its own files: operators' acts made while it runs.

``flowcast keys rotate`` and ``rename`` write the keep's files directly; a
stack that loaded the keep earlier holds the old records in memory.  Before
it accepts a join from a key whose record an operator may have changed, or
rewrites that record (which would undo the operator's act on disk), it reads
that one record back: always before a write, else at most once a second per
name, so a flood of joins costs no disk beyond the writes it causes anyway.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from flowcast.transport.crypto import fingerprint

if TYPE_CHECKING:
    from flowcast.transport.keep import Keep, RemoteRecord, Verdict

__all__ = ["ROTATED_FROM", "ROTATED_TO", "read_record", "may_look", "recheck", "look_key", "pick_up_rotation", "resolve_rotations"]

ROTATED_FROM = "rotated from "
ROTATED_TO = "rotated to "


def read_record(keep: "Keep", fp: str) -> "RemoteRecord | None":
    """``fp``'s record as on disk, or None (missing, damaged, or not that key's)."""
    from flowcast.transport.keep import RemoteRecord

    try:
        record = RemoteRecord.from_json(json.loads(keep._remote_file(fp).read_text()))
    except (OSError, KeyError, ValueError, TypeError):
        return None
    return record if record.fingerprint == fp else None


def may_look(keep: "Keep", name: str, now: float) -> bool:
    """At most one look a second per name (bounded memory: the oldest names go)."""
    return _once_a_second(keep._rechecked, name, now)


def _once_a_second(looked: dict, key: str, now: float) -> bool:
    """True at most once a second per ``key``; ``looked`` keeps the 4,096 latest keys."""
    last = looked.pop(key, None)
    if last is not None and now - last < 1.0:
        looked[key] = last
        return False
    looked[key] = now
    if len(looked) > 4096:
        del looked[next(iter(looked))]
    return True


def recheck(keep: "Keep", known: "RemoteRecord", name: str, now: float, force: bool) -> "Verdict | None":
    """Adopt an operator's rejection, rotation or rename of accepted ``known``.

    Returns the verdict for the join when the key is no longer accepted on
    disk (with the rotation's successor, loaded if need be), else None (the
    join goes on; a rename to ``name`` has been adopted).  Skipped while
    this keep's own write of the record is queued: memory is newer then.
    """
    from flowcast.transport.keep import Status, Verdict

    if keep.path is None or (not force and not may_look(keep, known.name, now)) or keep.unwritten(known.fingerprint):
        return None
    disk = read_record(keep, known.fingerprint)
    if disk is None:
        return None
    if disk.status is Status.REJECTED:
        keep._reindex(known, status=Status.REJECTED, note=disk.note)
        successor = None
        if disk.note.startswith(ROTATED_TO):
            successor = _load_successor(keep, known.name, disk.note[len(ROTATED_TO):].strip())
        if successor is None:
            return Verdict(Status.REJECTED, known, "this key was rejected by an operator")
        fp = known.fingerprint
        return Verdict(
            Status.REJECTED, known, "this key was rotated away by an operator",
            [f"rotated {known.name} {fp} {successor.fingerprint}"], [fp], successor,
        )
    if disk.status is Status.ACCEPTED and disk.name == name != known.name and keep.bound(name) is None:
        keep._reindex(known, name=name)  # an operator's `flowcast keys rename`
    return None


def look_key(keep: "Keep", known: "RemoteRecord", now: float) -> "Verdict | None":
    """Is accepted ``known`` still accepted on disk?  Asked before an allow and of live sessions.

    An allow needs no JOIN, so without this look a key an operator rejected,
    rotated away or forgot would keep its name's authority until a restart.
    Returns the refusal (as :func:`recheck`: a rotation's successor loaded;
    a forgotten key leaves memory too, named in ``evicted``), else None.
    At most one look a second per key; none while this keep's own write of
    the record is queued (memory is newer then), none of an in-memory keep.
    """
    from flowcast.transport.keep import Status, Verdict

    fp = known.fingerprint
    if keep.path is None or known.status is not Status.ACCEPTED or not _may_look_key(keep, fp, now) or keep.unwritten(fp):
        return None
    try:
        keep._remote_file(fp).stat()
    except FileNotFoundError:
        if keep._remotes.get(fp) is known:
            keep._unindex(known)
            del keep._remotes[fp]
        known.status = Status.REJECTED  # the object a stack holds names no one now
        return Verdict(Status.REJECTED, known, "this key was forgotten by an operator", [f"forgotten {known.name} {fp}"], [fp])
    except OSError:
        return None  # unreadable now: the next look decides (a damaged file is left to the join path and a restart)
    return recheck(keep, known, known.name, now, force=True)


def _may_look_key(keep: "Keep", fp: str, now: float) -> bool:
    return _once_a_second(keep._key_looked, fp, now)


def _load_successor(keep: "Keep", name: str, fp: str) -> "RemoteRecord | None":
    from flowcast.transport.keep import Status

    record = keep._remotes.get(fp)
    if record is None:
        record = read_record(keep, fp) if len(fp) == 32 else None
        if record is None or record.status is not Status.ACCEPTED or record.name != name or keep.bound(name) is not None:
            return None
        keep._remotes[fp] = record
        keep._index(record)
        keep._next_uid = max(keep._next_uid, record.uid + 1)
    return record if record.status is Status.ACCEPTED and record.name == name else None


def pick_up_rotation(keep: "Keep", name: object, verkey: bytes, pubkey: bytes, now: float) -> "RemoteRecord | None":
    """A bound name presented with another key: did an operator rotate it to exactly that key?

    Then the new key's file is accepted under the name and the bound key's
    file is REJECTED "rotated to" it (or gone: keeps rotated before that
    mark), and not merely unwritten yet by this keep.  The old record is
    marked rejected here too and returned.
    """
    from flowcast.transport.keep import Status

    if keep.path is None or not isinstance(name, str) or len(verkey) != 32 or len(pubkey) != 32:
        return None
    old = keep._remotes.get(keep._by_name.get(name, ""))
    fp = fingerprint(verkey, pubkey)
    if old is None or old.fingerprint == fp or fp in keep._remotes or not may_look(keep, name, now):
        return None
    record = read_record(keep, fp)
    if record is None or record.name != name or record.status is not Status.ACCEPTED:
        return None
    if keep.unwritten(old.fingerprint):
        return None
    was = read_record(keep, old.fingerprint)
    if was is not None and not (was.status is Status.REJECTED and was.note == f"{ROTATED_TO}{fp}"):
        return None
    keep._reindex(old, status=Status.REJECTED, note=f"{ROTATED_TO}{fp}")
    keep._tickets.pop(old.fingerprint, None)
    keep._remotes[fp] = record
    keep._index(record)
    keep._next_uid = max(keep._next_uid, record.uid + 1)
    return old


def resolve_rotations(loaded: "list[RemoteRecord]") -> None:
    """A rotation wins over the key it replaced, whatever the files say.

    A running stack may have rewritten the old record after the rotation (or
    a crash may fall between the command's two writes).  Newest first, an
    accepted record "rotated from X" makes X rejected, so a rotation undone
    by a later one (rotated back) stays undone.
    """
    from flowcast.transport.keep import Status

    by_fp = {record.fingerprint: record for record in loaded}
    for record in sorted(loaded, key=lambda r: -r.uid):
        if record.status is Status.ACCEPTED and record.note.startswith(ROTATED_FROM):
            old = by_fp.get(record.note[len(ROTATED_FROM):].strip())
            if old is not None and old is not record and old.status is Status.ACCEPTED and old.name == record.name:
                old.status, old.note = Status.REJECTED, f"{ROTATED_TO}{record.fingerprint}"
