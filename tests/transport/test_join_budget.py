"""Cookie-answering join floods: a budget for join work, strays without fsyncs, bound names never evicted (issue 10.1, 10.2)."""

from __future__ import annotations

import os

import pytest

from flowcast.transport import handshake as hs
from flowcast.transport import roadjoin as road_module  # where the road parses JOINs
from flowcast.transport.crypto import LongTermKeys
from flowcast.transport.joinbudget import JoinBudget
from flowcast.transport.joingate import JoinGate, parse_join_cookie, wrap_join
from flowcast.transport.keep import MAX_PENDING, Acceptance, Keep, Status
from flowcast.transport.keepwriter import KeepWriter
from flowcast.transport.wire import PacketKind

from .roadkit import World


def _join(keys, name, tag):
    return hs.build_join(keys, name, name, 0, os.urandom(16), tag)


def test_the_budget_caps_join_work_and_a_new_source_is_served_at_once():
    budget = JoinBudget(100.0)
    sources = [("10.0.0.1", port) for port in range(40)]
    granted = 0
    for ms in range(5000):  # 5 s, 2,000 asks a second from 40 addresses
        for n in range(2):
            granted += budget.take(sources[(2 * ms + n) % 40], ms / 1000)
    assert granted <= 100 * 5 + 25 + 40 * 5  # the rate, its burst, each source's first burst
    assert granted >= 100 * 5 * 0.5  # ... and the flood is not shut out either
    assert budget.take(("10.0.0.2", 1), 5.0)  # a newcomer is not starved: its first ask is served
    # one source alone never gets more than its own rate
    alone = JoinBudget(100.0)
    got = sum(alone.take("one", ms / 1000) for ms in range(2000))
    assert got <= 20 * 2 + 5 + 1


def test_a_clock_stepping_back_costs_the_join_buckets_no_tokens():
    # The hand-written refills added (now - at) * rate even when negative:
    # a step back of 100 s left the gate and the budget 5,000 tokens in debt,
    # every JOIN cookied and refused long after the clock recovered.
    gate = JoinGate(mode="load", rate=50.0)
    budget = JoinBudget(100.0)
    assert not gate.needs_cookie(1000.0, False)
    assert budget.take(("10.0.0.1", 1), 1000.0)
    assert not gate.needs_cookie(900.0, False)  # tokens left from the burst: still served
    assert budget.take(("10.0.0.1", 1), 900.0)
    assert not gate.needs_cookie(1000.5, False)
    assert budget.take(("10.0.0.2", 1), 1000.5)


def test_a_cookie_answering_flood_gets_a_bounded_number_of_signature_checks_and_a_newcomer_joins(monkeypatch):
    """Was a finding: every answered cookie bought the flood a signature check, a signed reply and a keep record."""
    checks = []
    real = hs.parse_join
    monkeypatch.setattr(road_module.hs, "parse_join", lambda data: checks.append(1) or real(data))
    world = World(seed=71, delay=0.001)
    main = world.estate("main", policy="never")
    flooders = [world.net.port(f"flood{n}") for n in range(40)]
    packets = [_join(LongTermKeys.generate(), f"f{n}", n + 1) for n in range(600)]
    newcomer = world.estate("newcomer")
    attempt = None
    joined = False
    sent = 0
    for step in range(100):  # 2 s of virtual time, 2,000 JOINs a second, every cookie answered
        for n in range(40):
            flooders[n].send(packets[sent % 600], "main")
            sent += 1
        if step == 25:
            attempt = newcomer.join("main")
            started = world.scheduler.clock.now()
        world.run_for(0.02)
        for port in flooders:
            for data, _ in port.receive_many(64):
                parsed = parse_join_cookie(data) if data[1] == PacketKind.JOIN_COOKIE else None
                if parsed is not None:
                    port.send(wrap_join(packets[parsed[0] - 1], parsed[1]), "main")
        if attempt is not None and attempt.result is not None and world.scheduler.clock.now() - started < 0.5:
            joined = True
    assert main.counts["join_cookies"] > 1000 and main.counts["join_limited"] > 1000
    assert len(checks) <= 100 * 2 + 25 + 10  # join_work_rate a second (and its burst), not 2,000
    assert attempt.result == "pending" and joined  # the newcomer's first cookied JOIN was served


def test_strays_cost_no_fsync_and_the_most_recent_are_kept(tmp_path, monkeypatch):
    """Under never, a flood of fresh keys made a synced file per pending record."""
    syncs = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: syncs.append(fd) or real(fd))
    writer = KeepWriter()
    keep = Keep(tmp_path / "keep", writer=writer)
    keys = [LongTermKeys.generate() for _ in range(30)]
    for n, k in enumerate(keys):
        verdict = keep.admit(f"s{n}", "s", 0, k.verkey, k.pubkey, Acceptance.NEVER, float(n))
        assert verdict.status is Status.PENDING and keep.unwritten(k.fingerprint) == 0  # nobody waits for it
    assert writer.wait(writer._ticket)
    assert syncs == [] and len(list((tmp_path / "keep" / "remotes").glob("*.json"))) == 30
    # reloaded, the strays are there (when the disk kept them): an operator's to-do list
    assert len(Keep(tmp_path / "keep").remotes()) == 30
    # an accepted record is synced, file and directory
    accepted = LongTermKeys.generate()
    keep.admit("a", "a", 0, accepted.verkey, accepted.pubkey, Acceptance.ALWAYS, 1.0)
    assert keep.unwritten(accepted.fingerprint) and writer.wait(keep.unwritten(accepted.fingerprint) or writer._ticket)
    assert len(syncs) >= 2
    writer.close()


def test_pending_records_are_capped_most_recent_kept_and_accepted_never_evicted():
    keep = Keep(None, max_remotes=MAX_PENDING + 50)
    first = LongTermKeys.generate()
    keep.admit("first", "r", 0, first.verkey, first.pubkey, Acceptance.ALWAYS, 1.0)
    keys = [LongTermKeys.generate() for _ in range(MAX_PENDING + 20)]
    for n, k in enumerate(keys):
        assert keep.admit(f"p{n}", "r", 0, k.verkey, k.pubkey, Acceptance.NEVER, 1.0).status is Status.PENDING
    pending = [r for r in keep.remotes() if r.status is Status.PENDING]
    assert len(pending) == MAX_PENDING
    assert keep.get(keys[0].fingerprint) is None and keep.get(keys[19].fingerprint) is None
    assert keep.get(keys[20].fingerprint) is not None and keep.get(keys[-1].fingerprint) is not None
    assert keep.find("first").fingerprint == first.fingerprint


@pytest.mark.parametrize("policy", [Acceptance.ONCE, Acceptance.ALWAYS])
def test_a_flood_that_fills_the_keep_frees_no_bound_name(policy):
    """Was the known gap: a record that joined from the wire and never had a session was evicted, freeing its name."""
    keep = Keep(None, max_remotes=50)
    beta = LongTermKeys.generate()
    assert keep.admit("beta", "beta", 0, beta.verkey, beta.pubkey, policy, 1.0).status is Status.ACCEPTED
    refused = 0
    for n in range(80):  # strangers fill the keep (beta never had a session)
        k = LongTermKeys.generate()
        verdict = keep.admit(f"m{n}", "m", 0, k.verkey, k.pubkey, policy, 1.0)
        refused += verdict.status is Status.REJECTED
        assert not verdict.evicted
    assert refused == 31 and keep.full_refusals == 31 and len(keep.remotes()) == 50
    thief = LongTermKeys.generate()
    verdict = keep.admit("beta", "beta", 0, thief.verkey, thief.pubkey, policy, 2.0)
    assert verdict.status is Status.REJECTED
    assert keep.find("beta").fingerprint == beta.fingerprint


def test_at_the_cap_the_road_refuses_and_counts_a_new_key():
    world = World(seed=72, delay=0.001)
    main = world.estate("main", policy="once", keep=Keep(None, max_remotes=3))
    for name in ("a", "b", "c", "d"):
        joiner = world.estate(name)
        attempt = joiner.join("main")
        assert world.run_until(lambda: attempt.result is not None, 5)
    assert attempt.result == "refused" and "full" in attempt.reason
    assert main.counts["keep_full"] == 1 and main.keep.find("a") is not None
