"""An operator's rotate, reject or forget binds a running estate's allows and live sessions, not only its joins.

Was a gap: a running estate looked at the keep's files only before a JOIN,
so the old (perhaps stolen) key skipped the join, sent HELLO/INITIATE and
got a session with the name's authority until a restart.
"""

from __future__ import annotations

import pytest

from flowcast.transport import keycli
from flowcast.transport.keep import Keep, RemoteRecord, Status
from flowcast.transport.keepwriter import KeepWriter
from flowcast.transport.road import REMOTE_FORGOTTEN

from .attacks import Attacks, inject_sealed
from .roadkit import World


def _knows(stack, other, address=None):
    """``stack`` trusts ``other``'s keys (as an operator's accept would make it)."""
    keys = other.keys
    return stack.add_remote(RemoteRecord(other.local.name, other.local.name, 0, keys.verkey, keys.pubkey, Status.ACCEPTED), address)


def _inbox(stack):
    got = []
    while (message := stack.receive()) is not None:
        got.append((message.remote, message.data))
    return got


def _estates(tmp_path, seed, writer=None):
    world = World(seed=seed, delay=0.001)
    main = world.estate("main", keep=Keep(tmp_path / "keep", writer=writer), policy="never")
    alpha = world.estate("alpha")
    _knows(main, alpha)
    _knows(alpha, main, "main")
    if writer is not None:
        assert writer.wait(main.keep.ticket)  # the operator acts on what is on disk
    return world, main, alpha


@pytest.mark.parametrize("background", [False, True])
def test_a_key_rotated_away_cannot_allow_without_joining(tmp_path, background):
    writer = KeepWriter() if background else None
    world, main, alpha = _estates(tmp_path, 91, writer)
    waiting = main.send({"to": "alpha"}, "alpha")  # alpha has not allowed yet: it waits in the backlog
    renewed = world.estate("alpha", address="alpha2")
    argv = ["--keep", str(tmp_path / "keep"), "rotate", "alpha", renewed.keys.verkey.hex(), renewed.keys.pubkey.hex()]
    assert keycli.main(argv) == 0
    # the old key skips the join and allows directly
    alpha.allow("main")
    world.run_for(3.0)
    assert not main.is_allowed("alpha") and not alpha.is_allowed("main")
    assert main.counts["allow_revoked"] == 1 and main.counts["rotations"] == 1
    assert any(e.startswith("allow refused to alpha") and "rotated away" in e for e in main.events)
    assert main.remote("alpha").fingerprint == renewed.keys.fingerprint
    assert alpha.keys.fingerprint not in main.remotes
    # the old key keeps trying: refused without another look at the disk
    alpha.allow("main")
    world.run_for(1.0)
    assert not main.is_allowed("alpha") and main.counts["allow_revoked"] == 1 and main.counts["not_accepted"] >= 1
    # what waited for the name goes to its new key, which allows without a join too
    _knows(renewed, main, "main")
    renewed.allow("main")
    assert world.run_until(lambda: waiting.delivered, 10)
    assert _inbox(renewed) == [("main", {"to": "alpha"})]
    if writer is not None:
        assert writer.wait(main.keep.ticket)
        writer.close()
    assert Keep(tmp_path / "keep").find("alpha").fingerprint == renewed.keys.fingerprint


@pytest.mark.parametrize("act", ["reject", "forget"])
def test_a_key_an_operator_rejected_or_forgot_cannot_allow(tmp_path, act):
    world, main, alpha = _estates(tmp_path, 92)
    waiting = main.send({"to": "alpha"}, "alpha")
    assert keycli.main(["--keep", str(tmp_path / "keep"), act, "alpha"]) == 0
    alpha.allow("main")
    sent = alpha.send({"from": "alpha"}, "main", timeout=2.0)
    world.run_for(3.0)
    assert not main.is_allowed("alpha") and main.counts["allow_revoked"] == 1
    assert sent.done and not sent.delivered and _inbox(main) == []
    # nobody else holds the name: what waited for it fails, told
    assert waiting.done and not waiting.delivered and waiting.reason == REMOTE_FORGOTTEN
    assert main.presence("alpha").value == "unknown"
    on_disk = Keep(tmp_path / "keep").get(alpha.keys.fingerprint)
    if act == "reject":
        assert main.keep.get(alpha.keys.fingerprint).status is Status.REJECTED and on_disk.status is Status.REJECTED
    else:
        assert main.keep.get(alpha.keys.fingerprint) is None and on_disk is None


@pytest.mark.parametrize("act", ["reject", "forget", "rotate"])
def test_a_live_session_of_a_key_an_operator_took_back_ends(tmp_path, act):
    world, main, alpha = _estates(tmp_path, 93)
    alpha.allow("main")
    assert world.run_until(lambda: main.is_allowed("alpha") and alpha.is_allowed("main"), 10)
    first = alpha.send({"n": 1}, "main")
    assert world.run_until(lambda: first.delivered, 5) and _inbox(main) == [("alpha", {"n": 1})]
    renewed = world.estate("alpha", address="alpha2")
    argv = ["rotate", "alpha", renewed.keys.verkey.hex(), renewed.keys.pubkey.hex()] if act == "rotate" else [act, "alpha"]
    assert keycli.main(["--keep", str(tmp_path / "keep"), *argv]) == 0
    # the sweep looks at live sessions' records: the session ends within a few heartbeats
    assert world.run_until(lambda: not main.is_allowed("alpha"), 5)
    assert main.counts["session_revoked"] == 1 and main.counts["allow_revoked"] == 0
    assert any(e.startswith("session ended of alpha") for e in main.events)
    later = alpha.send({"n": 2}, "main", timeout=3.0)
    world.run_for(4.0)
    assert later.done and not later.delivered and _inbox(main) == []
    assert not main.is_allowed("alpha")
    if act == "rotate":
        assert main.counts["rotations"] == 1 and main.remote("alpha").fingerprint == renewed.keys.fingerprint


def test_allows_look_at_the_disk_at_most_once_a_second_per_key(tmp_path, monkeypatch):
    world, main, alpha = _estates(tmp_path, 94)
    alpha.allow("main")
    assert world.run_until(lambda: main.is_allowed("alpha"), 10)
    world.run_for(1.1)
    opened = []
    real_file = Keep._remote_file
    monkeypatch.setattr(Keep, "_remote_file", lambda self, fp: opened.append(fp) or real_file(self, fp))
    sessions = sum(e.startswith("allowed alpha") for e in main.events)
    for _ in range(5):  # each re-allow makes a new session at main
        alpha.allow("main")
        world.run_for(0.15)
    assert sum(e.startswith("allowed alpha") for e in main.events) - sessions == 5
    assert opened.count(alpha.keys.fingerprint) == 2  # one look (a stat, then the read), not one per allow


def test_the_sweep_reads_a_bounded_number_of_records_a_second_and_reaches_every_session(tmp_path, monkeypatch):
    world = World(seed=95, delay=0.001)
    main = world.estate("main", keep=Keep(tmp_path / "keep"), policy="never")
    others = [world.estate(f"e{n}") for n in range(40)]
    for other in others:
        _knows(main, other)
        _knows(other, main, "main")
        other.allow("main")
    assert world.run_until(lambda: all(main.is_allowed(o.local.name) for o in others), 10)
    world.run_for(1.5)  # the allows' looks are over a second old: the sweep's looks are due
    opened = []
    real_file = Keep._remote_file
    monkeypatch.setattr(Keep, "_remote_file", lambda self, fp: opened.append(fp) or real_file(self, fp))
    world.run_for(1.0)
    assert 0 < len(opened) <= 2 * 32  # a stat and a read per look, 32 looks a second
    world.run_for(2.0)
    assert {o.keys.fingerprint for o in others} <= set(opened)  # a round reaches every session
    assert main.counts["session_revoked"] == 0 and all(main.is_allowed(o.local.name) for o in others)


def test_what_an_ended_session_held_leaves_the_hold_budget(tmp_path):
    """Was a leak on the rotation path: a retired session's held pieces stayed counted in the stack's budget."""
    world, main, alpha = _estates(tmp_path, 96)
    alpha.allow("main")
    assert world.run_until(lambda: main.is_allowed("alpha"), 10)
    attacks = Attacks(main.datagram_size - 64, main.max_message)
    for body in attacks.never():  # pieces of a message that never completes: held at main
        inject_sealed(alpha, "main", body)
    world.run_for(0.1)
    assert main.hold_budget.used > 0
    renewed = world.estate("alpha", address="alpha2")
    argv = ["--keep", str(tmp_path / "keep"), "rotate", "alpha", renewed.keys.verkey.hex(), renewed.keys.pubkey.hex()]
    assert keycli.main(argv) == 0
    assert world.run_until(lambda: main.counts["session_revoked"] == 1, 5)
    assert main.hold_budget.used == 0
