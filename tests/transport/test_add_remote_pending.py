"""``RoadStack.add_remote`` of a record the keep holds as pending (issue 25, finding 10).

An operator trusting a pending join through the stack must leave the keep
as ``flowcast keys accept`` would: the name bound to that key in the keep's
index, and the change on disk, so a restart finds the remote accepted.
"""

from __future__ import annotations

from flowcast.transport.crypto import LongTermKeys
from flowcast.transport.keep import Acceptance, Keep, RemoteRecord, Status
from tests.transport.roadkit import World


def _pending(keep: Keep, name: str) -> RemoteRecord:
    keys = LongTermKeys.generate()
    verdict = keep.admit(name, name, 0, keys.verkey, keys.pubkey, Acceptance.NEVER)
    assert verdict.status is Status.PENDING
    return RemoteRecord(name, name, 0, keys.verkey, keys.pubkey, Status.PENDING)


def test_add_remote_of_a_pending_record_binds_its_name_and_saves_it(tmp_path):
    world = World()
    keep = Keep(tmp_path / "keep")
    road = world.estate("alpha", keep=keep)
    record = _pending(keep, "beta")
    assert keep.bound("beta") is None  # a pending record binds nothing

    remote = road.add_remote(record, "beta")

    bound = keep.bound("beta")
    assert bound is not None and bound.fingerprint == record.fingerprint and bound.status is Status.ACCEPTED
    assert road.remote("beta") is remote
    again = Keep(tmp_path / "keep")  # what a restart reads
    assert again.get(record.fingerprint).status is Status.ACCEPTED
    assert again.bound("beta").fingerprint == record.fingerprint

