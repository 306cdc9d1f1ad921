"""A pending record is a request; a name is bound only by an acceptance, and moved only by an operator.

Findings of the second outside review (evicted pending name taken over,
rotation undone by the old key, accepted key renaming itself, a stale join
accepting in memory only).
"""

from __future__ import annotations

import json

import pytest

from flowcast.transport import keycli
from flowcast.transport.crypto import LongTermKeys
from flowcast.transport.keep import Acceptance, Keep, KeepError, RemoteRecord, Status

from .roadkit import World


def _admit(keep, name, keys, policy, stamp, now=None):
    return keep.admit(name, name, 0, keys.verkey, keys.pubkey, policy, stamp, now)


# -- 1: pending requests bind nothing -----------------------------------------------------


def test_an_evicted_pending_request_frees_no_name_for_the_flooder():
    """Was a finding: a flood evicted honest pending "billing", the attacker's key took the name and the honest re-join was refused."""
    keep = Keep(None, max_remotes=4)
    honest, evil = LongTermKeys.generate(), LongTermKeys.generate()
    assert _admit(keep, "billing", honest, Acceptance.NEVER, 1.0).status is Status.PENDING
    for n in range(4):  # the flood churns the strays, the honest request first
        _admit(keep, f"junk{n}", LongTermKeys.generate(), Acceptance.NEVER, 1.0)
    assert keep.get(honest.fingerprint) is None
    assert _admit(keep, "billing", evil, Acceptance.NEVER, 2.0).status is Status.PENDING
    assert keep.bound("billing") is None
    again = _admit(keep, "billing", honest, Acceptance.NEVER, 3.0)
    assert again.status is Status.PENDING and again.record.fingerprint == honest.fingerprint
    with pytest.raises(KeepError, match="give the fingerprint"):
        keep.find("billing")


def test_several_pending_requests_share_a_name_and_accept_needs_the_fingerprint(tmp_path, capsys):
    keep_dir = str(tmp_path / "keep")
    keep = Keep(keep_dir)
    honest, evil = LongTermKeys.generate(), LongTermKeys.generate()
    for keys in (honest, evil):
        assert _admit(keep, "billing", keys, Acceptance.NEVER, 1.0).status is Status.PENDING
    assert keycli.main(["--keep", keep_dir, "list"]) == 0
    listed = capsys.readouterr().out
    assert honest.fingerprint in listed and evil.fingerprint in listed
    assert keycli.main(["--keep", keep_dir, "accept", "billing"]) == 1
    err = capsys.readouterr().err
    assert "give the fingerprint" in err and honest.fingerprint in err and evil.fingerprint in err
    assert all(r.status is Status.PENDING for r in Keep(keep_dir).remotes())
    assert keycli.main(["--keep", keep_dir, "accept", honest.fingerprint]) == 0
    # the name is bound now: the other request can be neither accepted nor take it by joining
    assert keycli.main(["--keep", keep_dir, "accept", evil.fingerprint]) == 1
    reopened = Keep(keep_dir)
    assert reopened.bound("billing").fingerprint == honest.fingerprint
    for policy in Acceptance:
        verdict = _admit(reopened, "billing", evil, policy, 5.0)
        assert verdict.status is not Status.ACCEPTED and reopened.bound("billing").fingerprint == honest.fingerprint


def test_a_flood_on_the_road_leaves_the_honest_request_acceptable():
    world = World(seed=301, delay=0.001)
    beta = world.estate("beta", keep=Keep(None, max_remotes=8), policy="never")
    honest = world.estate("billing")
    first = honest.join("beta", timeout=2)
    assert world.run_until(lambda: first.result == "pending", 5)
    for n in range(10):
        world.estate(f"junk{n}").join("beta", timeout=1)
        world.run_for(0.2)
    assert beta.keep.get(honest.keys.fingerprint) is None  # evicted: it was only a request
    thief = world.estate("thief", keep=_keep_named("billing"))
    stolen = thief.join("beta", timeout=2)
    assert world.run_until(lambda: stolen.result == "pending", 5)
    again = honest.join("beta", timeout=2)
    assert world.run_until(lambda: again.result == "pending", 5)
    beta.keep.set_status(honest.keys.fingerprint, Status.ACCEPTED)
    accepted = honest.join("beta")
    assert world.run_until(lambda: accepted.result == "accepted" and honest.is_allowed("beta"), 10)
    assert beta.remote("billing").fingerprint == honest.keys.fingerprint


def _keep_named(name: str) -> Keep:
    keep = Keep(None)
    keep.ensure_local(name)
    return keep


# -- 2: a rotation cannot be undone ---------------------------------------------------------


def _rotated(tmp_path):
    keep_dir = str(tmp_path / "keep")
    running = Keep(keep_dir)
    old, new = LongTermKeys.generate(), LongTermKeys.generate()
    assert _admit(running, "billing", old, Acceptance.ONCE, 1.0).status is Status.ACCEPTED
    assert keycli.main(["--keep", keep_dir, "rotate", "billing", new.verkey.hex(), new.pubkey.hex()]) == 0
    return keep_dir, running, old, new


def _after_restart_the_rotation_stands(keep_dir, old, new):
    restarted = Keep(keep_dir)
    assert restarted.bound("billing").fingerprint == new.fingerprint
    assert restarted.get(old.fingerprint).status is Status.REJECTED
    assert _admit(restarted, "billing", old, Acceptance.ALWAYS, 50.0, now=100.0).status is Status.REJECTED
    assert _admit(restarted, "billing", new, Acceptance.NEVER, 51.0, now=100.0).status is Status.ACCEPTED


def test_the_old_key_joining_first_after_a_rotation_finds_it_on_disk(tmp_path):
    """Was a finding: the running stack rewrote the old record from memory and a restart gave the name back to the old key."""
    keep_dir, running, old, new = _rotated(tmp_path)
    verdict = _admit(running, "billing", old, Acceptance.ONCE, 2.0, now=10.0)
    assert verdict.status is Status.REJECTED and verdict.successor.fingerprint == new.fingerprint
    assert verdict.evicted == [old.fingerprint] and verdict.events[0].startswith("rotated billing ")
    assert running.bound("billing").fingerprint == new.fingerprint
    assert json.loads((tmp_path / "keep" / "remotes" / f"{old.fingerprint}.json").read_text())["status"] == "rejected"
    assert _admit(running, "billing", new, Acceptance.NEVER, 3.0, now=10.5).status is Status.ACCEPTED
    _after_restart_the_rotation_stands(keep_dir, old, new)


def test_the_new_key_joining_first_then_the_old_key_is_refused(tmp_path):
    keep_dir, running, old, new = _rotated(tmp_path)
    assert _admit(running, "billing", new, Acceptance.NEVER, 2.0, now=10.0).status is Status.ACCEPTED
    assert _admit(running, "billing", old, Acceptance.ALWAYS, 3.0, now=10.1).status is Status.REJECTED
    assert running.bound("billing").fingerprint == new.fingerprint
    _after_restart_the_rotation_stands(keep_dir, old, new)


def test_a_restart_lets_the_rotation_win_over_a_rewritten_old_record(tmp_path):
    """As a stack from before the fix (or one racing the CLI) would leave it: both records accepted, the old with the lower uid."""
    keep_dir, running, old, new = _rotated(tmp_path)
    path = tmp_path / "keep" / "remotes" / f"{old.fingerprint}.json"
    data = json.loads(path.read_text())
    data.update(status="accepted", note="")
    path.write_text(json.dumps(data))
    _after_restart_the_rotation_stands(keep_dir, old, new)


def test_a_rotation_back_to_an_earlier_key_stays_with_the_newest(tmp_path):
    keep_dir, running, old, new = _rotated(tmp_path)
    assert keycli.main(["--keep", keep_dir, "rotate", "billing", old.verkey.hex(), old.pubkey.hex()]) == 0
    assert Keep(keep_dir).bound("billing").fingerprint == old.fingerprint


def test_the_old_key_joining_a_running_estate_after_a_rotation_is_refused_and_its_messages_move(tmp_path):
    world = World(seed=302, delay=0.001)
    main = world.estate("main", keep=Keep(tmp_path / "keep"), policy="once")
    alpha = world.estate("alpha")
    first = alpha.join("main")
    assert world.run_until(lambda: first.result == "accepted" and alpha.is_allowed("main"), 10)
    renewed = world.estate("alpha", address="alpha2")
    argv = ["--keep", str(tmp_path / "keep"), "rotate", "alpha", renewed.keys.verkey.hex(), renewed.keys.pubkey.hex()]
    assert keycli.main(argv) == 0
    waiting = main.send({"to": "alpha"}, "alpha", timeout=30.0)  # queued for the name, not for a key
    stolen = alpha.join("main")
    assert world.run_until(lambda: stolen.result is not None, 5) and stolen.result == "refused"
    assert main.counts["rotations"] == 1 and alpha.keys.fingerprint not in main.remotes
    heir = main.remotes[renewed.keys.fingerprint]  # the message waits for the new key, its bytes counted against the backlog's bound
    assert heir.backlog == [waiting] and heir.backlog_bytes == len(waiting.data)
    attempt = renewed.join("main")
    assert world.run_until(lambda: attempt.result == "accepted" and renewed.is_allowed("main"), 10), attempt.reason
    assert world.run_until(lambda: waiting.delivered, 10)
    got = renewed.receive()
    assert got is not None and got.data == {"to": "alpha"}
    assert Keep(tmp_path / "keep").bound("alpha").fingerprint == renewed.keys.fingerprint


# -- 3: an accepted key cannot rename itself -----------------------------------------------


@pytest.mark.parametrize("policy", list(Acceptance))
def test_an_accepted_key_renaming_itself_is_refused_and_keeps_its_name(policy):
    """Was a finding: under ``never`` an accepted "sensor7" re-joined as "billing" and was accepted with billing's authority."""
    keep = Keep(None)
    sensor, other = LongTermKeys.generate(), LongTermKeys.generate()
    verdict = _admit(keep, "sensor7", sensor, policy, 1.0)
    if verdict.status is Status.PENDING:
        keep.set_status(sensor.fingerprint, Status.ACCEPTED)
    renamed = _admit(keep, "billing", sensor, policy, 2.0)
    assert renamed.status is Status.REJECTED and renamed.events[0].startswith("rename-refused sensor7 billing ")
    assert keep.rename_refusals == 1
    assert keep.bound("billing") is None and keep.bound("sensor7").fingerprint == sensor.fingerprint
    assert _admit(keep, "sensor7", other, policy, 3.0).status is Status.REJECTED  # not freed
    assert _admit(keep, "sensor7", sensor, policy, 4.0).status is Status.ACCEPTED
    keep.rename("sensor7", "billing")  # the operator allows it
    assert _admit(keep, "billing", sensor, policy, 5.0).status is Status.ACCEPTED
    assert keep.bound("billing").fingerprint == sensor.fingerprint and keep.bound("sensor7") is None


def test_keys_rename_on_a_running_keep_is_picked_up_at_the_next_join(tmp_path, capsys):
    keep_dir = str(tmp_path / "keep")
    running = Keep(keep_dir)
    sensor, holder = LongTermKeys.generate(), LongTermKeys.generate()
    _admit(running, "sensor7", sensor, Acceptance.ONCE, 1.0)
    _admit(running, "billing", holder, Acceptance.ONCE, 1.0)
    assert keycli.main(["--keep", keep_dir, "rename", "sensor7", "billing"]) == 1  # bound to another key
    assert "bound" in capsys.readouterr().err
    assert keycli.main(["--keep", keep_dir, "rename", "sensor7", "meter7"]) == 0
    assert _admit(running, "meter7", sensor, Acceptance.NEVER, 2.0, now=10.0).status is Status.ACCEPTED
    assert running.bound("meter7").fingerprint == sensor.fingerprint and running.bound("sensor7") is None
    assert Keep(keep_dir).bound("meter7").fingerprint == sensor.fingerprint


# -- 4: every acceptance is durable before it is told --------------------------------------


def test_a_stale_join_under_always_that_accepts_a_pending_key_saves_it(tmp_path):
    """Was a finding: a stale-stamp JOIN under ``always`` changed pending to accepted in memory only."""
    keep = Keep(tmp_path / "keep")
    keys = LongTermKeys.generate()
    assert _admit(keep, "alpha", keys, Acceptance.NEVER, 5.0).status is Status.PENDING
    assert _admit(keep, "alpha", keys, Acceptance.ALWAYS, 5.0).status is Status.ACCEPTED
    assert Keep(tmp_path / "keep").get(keys.fingerprint).status is Status.ACCEPTED


def test_a_pending_request_is_not_accepted_under_always_onto_a_bound_name():
    keep = Keep(None)
    early, owner = LongTermKeys.generate(), LongTermKeys.generate()
    _admit(keep, "alpha", early, Acceptance.NEVER, 1.0)
    keep.add(RemoteRecord("alpha", "alpha", 0, owner.verkey, owner.pubkey, Status.ACCEPTED))
    verdict = _admit(keep, "alpha", early, Acceptance.ALWAYS, 2.0)
    assert verdict.status is Status.REJECTED and keep.get(early.fingerprint).status is Status.PENDING
    assert keep.bound("alpha").fingerprint == owner.fingerprint
