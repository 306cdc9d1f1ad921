"""`flowcast keys rotate` takes effect on a running estate, without a restart (issue 10.2)."""

from __future__ import annotations

import pytest

from flowcast.transport import keycli
from flowcast.transport.keep import Keep, RemoteRecord, Status
from flowcast.transport.keepwriter import KeepWriter

from .roadkit import World


@pytest.mark.parametrize("policy, background", [("never", False), ("once", True), ("always", False)])
def test_a_rotation_on_disk_is_picked_up_at_the_new_keys_join(tmp_path, policy, background):
    """Was a gap: a running estate picked up a rotation only when it restarted (the new key was refused)."""
    world = World(seed=81, delay=0.001)
    writer = KeepWriter() if background else None
    main = world.estate("main", keep=Keep(tmp_path / "keep", writer=writer), policy=policy)
    alpha = world.estate("alpha")
    main.keep.add(RemoteRecord("alpha", "alpha", 0, alpha.keys.verkey, alpha.keys.pubkey, Status.ACCEPTED))

    def durable() -> None:  # virtual time would outrun the writer's real fsyncs
        world.run_for(0.05)
        if writer is not None:
            assert writer.wait(main.keep.ticket)

    first = alpha.join("main")
    durable()
    assert world.run_until(lambda: first.result == "accepted" and alpha.is_allowed("main"), 10)
    durable()
    name = "alpha"  # one name object for every send: the send path remembers its remote (roadsend.py)
    before = main.send_bytes(b"to the old key", name)
    assert world.run_until(lambda: before.state == "delivered", 5) and alpha.receive().data == b"to the old key"
    # alpha's estate gets new keys; a thief tries its own before the operator acts
    renewed = world.estate("alpha", address="alpha2")
    thief = world.estate("alpha", address="thief")
    early = renewed.join("main")
    assert world.run_until(lambda: early.result is not None, 5) and early.result == "refused"
    # the operator rotates the name on the running estate's keep directory
    argv = ["--keep", str(tmp_path / "keep"), "rotate", "alpha", renewed.keys.verkey.hex(), renewed.keys.pubkey.hex()]
    assert keycli.main(argv) == 0
    world.run_for(1.1)  # the name was looked up on disk less than a second ago (the refused join)
    attempt = renewed.join("main")
    durable()
    assert world.run_until(lambda: attempt.result is not None and renewed.is_allowed("main"), 10), attempt.reason
    assert attempt.result == "accepted" and main.counts["rotations"] == 1
    assert main.remote("alpha").fingerprint == renewed.keys.fingerprint
    assert main.keep.find("alpha").fingerprint == renewed.keys.fingerprint
    assert alpha.keys.fingerprint not in main.remotes and main.keep.get(alpha.keys.fingerprint).status is Status.REJECTED
    # the new key writes as alpha; the old key's session is over
    sent = renewed.send({"from": "renewed"}, "main")
    stale = alpha.send({"from": "old key"}, "main", timeout=2.0)
    world.run_until(lambda: sent.delivered and stale.done, 10)
    got = []
    while (message := main.receive()) is not None:
        got.append((message.remote, message.data))
    assert got == [("alpha", {"from": "renewed"})]
    after = main.send_bytes(b"to the new key", name)  # the same name object: the new key's remote now
    assert world.run_until(lambda: after.state == "delivered", 5)
    assert renewed.receive().data == b"to the new key" and alpha.receive() is None
    # the thief's key is still refused, and a restart sees the same binding
    stolen = thief.join("main")
    world.run_for(1.1)
    assert world.run_until(lambda: stolen.result is not None, 5) and stolen.result == "refused"
    if writer is not None:
        assert writer.wait(main.keep.ticket)
        writer.close()
    assert Keep(tmp_path / "keep").find("alpha").fingerprint == renewed.keys.fingerprint


def test_a_changed_key_looks_at_the_disk_at_most_once_a_second_per_name(tmp_path, monkeypatch):
    world = World(seed=82, delay=0.001)
    main = world.estate("main", keep=Keep(tmp_path / "keep"), policy="always")
    alpha = world.estate("alpha")
    first = alpha.join("main")
    assert world.run_until(lambda: first.result == "accepted", 5)
    looks = []
    real = RemoteRecord.from_json
    monkeypatch.setattr(RemoteRecord, "from_json", classmethod(lambda cls, data: looks.append(1) or real(data)))
    opened = []
    real_file = Keep._remote_file
    monkeypatch.setattr(Keep, "_remote_file", lambda self, fp: opened.append(fp) or real_file(self, fp))
    thieves = [world.estate("alpha", address=f"thief{n}") for n in range(5)]
    for thief in thieves:
        thief.join("main")
    world.run_for(0.5)
    assert main.counts["key_changed"] >= 5
    assert len(opened) == 1 and looks == []  # one failed open for the name in that second
