"""RemoteTable: which remotes a road knows, by fingerprint and by name.

A remote is known by its key (``stack.remotes``, by fingerprint) and by
the one name it holds (``stack._by_name``).  Adding one comes from the
keep's verdicts (a join, an operator's rotation); dropping one comes from
the keep forgetting it (evicted, revoked), and then nothing of it may stay
anywhere in the stack: its half-made allow, its deadlines, its cached key
agreement, and what waited for it, which fails so its senders hear.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flowcast.transport.keep import RemoteRecord, Status
from flowcast.transport.port import Address
from flowcast.transport.roadremote import Remote

if TYPE_CHECKING:
    from flowcast.transport.road import RoadStack

__all__ = ["RemoteTable", "REMOTE_FORGOTTEN"]

#: The reason of a message failed because its remote left the keep (evicted) while it waited.
REMOTE_FORGOTTEN = "remote forgotten"


class RemoteTable:
    """Adds and drops the remotes of one road (the dicts stay the stack's: the hot path reads them)."""

    def __init__(self, stack: RoadStack) -> None:
        self.stack = stack

    def add(self, record: RemoteRecord, address: Address | None) -> Remote:
        """Know ``record`` (or update what is known of it); it holds its name unless an accepted holder has it."""
        stack = self.stack
        stack._forget_last()  # the send path's cache of a name's remote (roadsend.py)
        by_name = stack._by_name
        remote = stack.remotes.get(record.fingerprint)
        if remote is None:
            remote = Remote(record, address, stack._places)
            stack.remotes[record.fingerprint] = remote
        elif address is not None and remote.session is None:
            remote.address = address
        # A remote holds at most one name (this keeps it so), the one in
        # ``named``: a name given up by a rename is free again, found without
        # a look through every name (this runs once per admitted join).
        named = remote.named
        if named is not None and named != record.name and by_name.get(named) is remote:
            del by_name[named]
        holder = by_name.get(record.name)
        if holder is None or holder is remote or holder.record.status is not Status.ACCEPTED or holder.record.name != record.name:
            by_name[record.name] = remote
            remote.named = record.name
        stack._touch(remote)
        return remote

    def drop(self, fp: str) -> None:
        """Forget the remote of ``fp`` unless it has a session (a live session is revoked, not dropped)."""
        stack = self.stack
        remote = stack.remotes.get(fp)
        if remote is None or remote.session is not None:
            return
        stack._forget_last()
        del stack.remotes[fp]
        remote.address = None  # leaves the address count
        if stack._by_name.get(remote.name) is remote:
            del stack._by_name[remote.name]
        stack._allows.abandon(remote)
        # What waited for it can never go now: it fails, so its senders hear
        # (the router routes an error back) rather than wait on a remote gone.
        backlog, remote.backlog = remote.backlog, []
        remote.backlog_bytes = 0
        for msg in backlog:
            stack._fail(msg, REMOTE_FORGOTTEN)
        remote.due = None  # its heap entries are stale now
        stack._dirty.pop(remote, None)
        stack._flushq.pop(remote, None)
        stack._starved.pop(remote, None)
        stack._long_shared.pop(remote.record.pubkey, None)  # cached only for accepted remotes
