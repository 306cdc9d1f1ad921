"""Join floods (issue 10.1): stateless JOIN cookies under load, keep writes off the stack's thread."""

from __future__ import annotations

import os
import threading

import pytest

from flowcast.transport import handshake as hs
from flowcast.transport import roadjoin as road_module  # where the road parses JOINs
from flowcast.transport.crypto import LongTermKeys
from flowcast.transport.joingate import JoinGate, parse_join_cookie, wrap_join
from flowcast.transport.keep import Acceptance, Keep, Status
from flowcast.transport.keepwriter import KeepWriter
from flowcast.transport.wire import PacketKind

from .roadkit import World


@pytest.fixture
def verifications(monkeypatch):
    """Counts JOIN signature checks (the public-key work a flood must not get for free)."""
    calls = []
    real = hs.parse_join

    def counting(data):
        calls.append(1)
        return real(data)

    monkeypatch.setattr(road_module.hs, "parse_join", counting)
    return calls


def _join(keys, name="stranger", tag=7):
    return hs.build_join(keys, name, name, 0, os.urandom(16), tag)


def test_under_load_a_join_gets_a_cookie_and_costs_no_key_work_or_state(verifications):
    world = World(seed=51, delay=0.001)
    main = world.estate("main", policy="always", join_cookies="always")
    mallory = world.net.port("mallory")
    keys = LongTermKeys.generate()
    join = _join(keys)
    mallory.send(join, "main")
    world.run_for(0.2)
    answer, _ = mallory.receive()
    tag, cookie = parse_join_cookie(answer)
    assert answer[1] == PacketKind.JOIN_COOKIE and tag == 7 and len(answer) == 32 < len(join)
    assert verifications == [] and main.keep.remotes() == [] and main.counts["join_cookies"] == 1
    # the cookie is bound to the address it was sent to: from elsewhere it is worthless
    elsewhere = world.net.port("elsewhere")
    elsewhere.send(wrap_join(join, cookie), "main")
    mallory.send(wrap_join(join, bytes(16)), "main")
    world.run_for(0.2)
    assert main.counts["bad_join_cookie"] == 2 and verifications == [] and main.keep.remotes() == []
    # the source that received it gets its join read
    mallory.send(wrap_join(join, cookie), "main")
    world.run_for(0.2)
    reply, _ = mallory.receive()
    assert reply[1] == PacketKind.JOIN_ACCEPT and len(verifications) == 1
    assert main.keep.find("stranger").fingerprint == keys.fingerprint


def test_a_wrapped_packet_that_is_not_a_join_is_dropped_and_counted():
    world = World(seed=52, delay=0.001)
    main = world.estate("main", policy="always", join_cookies="always")
    mallory = world.net.port("mallory")
    join = _join(LongTermKeys.generate())
    mallory.send(join, "main")
    world.run_for(0.2)
    _, cookie = parse_join_cookie(mallory.receive()[0])
    hello = hs.build_hello(hs.ShortTerm(), main.keys.pubkey, 3)
    mallory.send(wrap_join(hello, cookie), "main")
    world.run_for(0.2)
    assert main.counts["bad_join"] == 1 and main.counts["internal_errors"] == 0 and mallory.receive() is None


@pytest.mark.parametrize("policy", ["always", "never"])
def test_a_join_flood_gets_cookies_while_a_real_estate_joins_through_them(policy, verifications):
    """Was a finding: every flooding JOIN cost a signature check and a keep record on the stack's thread."""
    world = World(seed=53, delay=0.001)
    main = world.estate("main", policy=policy, join_rate=20.0)
    alpha = world.estate("alpha")
    main.keep.add(main.keep.get(alpha.keys.fingerprint) or _record(alpha))
    assert main.keep.get(alpha.keys.fingerprint).status is Status.ACCEPTED
    flooders = [world.net.port(f"flood{n}") for n in range(8)]
    packets = [_join(LongTermKeys.generate(), f"f{n}", n + 1) for n in range(200)]
    newcomer = world.estate("newcomer")
    attempt = None
    for step in range(20):  # 2 s of virtual time, 1,000 JOINs a second
        for n in range(100):
            flooders[n % 8].send(packets[(step * 100 + n) % 200], "main")
        if step == 5:
            attempt = newcomer.join("main")
        world.run_for(0.1)
    assert attempt.result == ("accepted" if policy == "always" else "pending")
    # the flood got cookies, each of its 8 addresses at most 20 a second (640 B/s) and a burst
    # of five (replybudget.py), the rest refused and counted; only join_rate a second (and a
    # burst as big) got a signature check
    assert 8 * 20 <= main.counts["join_cookies"] <= 8 * (20 * 2 + 5) + 10
    assert main.counts["reply_limited"] >= 1000
    assert len(verifications) <= 20 * 2 + 20 + 10
    assert len(main.keep.remotes()) <= 20 * 2 + 20 + 2


def _record(stack):
    from flowcast.transport.keep import RemoteRecord

    return RemoteRecord(stack.local.name, stack.local.role, 0, stack.keys.verkey, stack.keys.pubkey, Status.ACCEPTED)


def test_join_gate_rotates_its_secret_and_a_cookie_lives_two_periods_at_most():
    gate = JoinGate(mode="always", period=10.0)
    cookie = gate.cookie(("127.0.0.1", 5), 0.0)
    assert gate.valid(("127.0.0.1", 5), cookie, 9.0) and gate.valid(("127.0.0.1", 5), cookie, 19.0)
    assert not gate.valid(("127.0.0.1", 6), cookie, 9.0)
    assert not gate.valid(("127.0.0.1", 5), cookie, 20.5)
    with pytest.raises(ValueError):
        JoinGate(mode="sometimes")


class _GatedWriter(KeepWriter):
    """A KeepWriter whose disk waits for the test to open it."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        super().__init__()

    def _write(self, batch):  # type: ignore[override]
        self.gate.wait(10.0)
        KeepWriter._write(batch)


def test_a_join_is_acknowledged_only_once_its_record_is_durable(tmp_path):
    writer = _GatedWriter()
    try:
        world = World(seed=54, delay=0.001)
        keep = Keep(tmp_path / "keep", writer=writer)
        main = world.estate("main", keep=keep, policy="always")
        alpha = world.estate("alpha")
        attempt = alpha.join("main")
        world.run_for(1.0)
        # admitted in memory, its record queued, and the joiner not told yet
        assert keep.get(alpha.keys.fingerprint) is not None and writer.durable < keep.ticket
        assert attempt.result is None and not (tmp_path / "keep" / "remotes" / f"{alpha.keys.fingerprint}.json").exists()
        writer.gate.set()
        assert writer.wait(keep.ticket)
        assert (tmp_path / "keep" / "remotes" / f"{alpha.keys.fingerprint}.json").exists()
        assert world.run_until(lambda: attempt.result == "accepted" and alpha.is_allowed("main"), 10)
        assert Keep(tmp_path / "keep").get(alpha.keys.fingerprint).status is Status.ACCEPTED
    finally:
        writer.gate.set()
        writer.close()


def test_the_writer_wakes_a_waiting_stack_itself(tmp_path):
    """The stack is told by the writer (a socket pair the scheduler watches), not by polling."""
    writer = KeepWriter()
    try:
        world = World(seed=55, delay=0.001)
        keep = Keep(tmp_path / "keep", writer=writer)
        main = world.estate("main", keep=keep, policy="always")
        sent = []
        main._emit = lambda data, address, carried=None: sent.append(data[1]) or True  # type: ignore[method-assign]
        keys = LongTermKeys.generate()
        world.net.port("joiner").send(_join(keys, "joiner"), "main")
        world.run_for(0.1)
        assert sent == [] and len(main._joins.unwritten) == 1
        assert writer.wait(keep.ticket)
        # nothing but the wake: the stack has no timer (no remote, no join of its own) and no datagram comes
        assert main.next_deadline() is None and main._timer is None
        for _ in range(200):
            if sent:
                break
            world.scheduler.run(until=world.scheduler.clock.now() + 0.001)
        assert sent == [PacketKind.JOIN_ACCEPT] and not main._joins.unwritten
    finally:
        writer.close()


def test_keep_writer_batches_with_one_directory_sync_and_bounds_its_queue(tmp_path, monkeypatch):
    import flowcast.transport.keepwriter as kw

    syncs = []
    monkeypatch.setattr(kw, "fsync_dir", lambda directory: syncs.append(directory))
    writer = KeepWriter(limit=100)
    gate = threading.Event()
    inside = threading.Event()
    real = writer._write
    writer._write = lambda batch: (inside.set(), gate.wait(10.0), real(batch))[2]  # type: ignore[method-assign]
    try:
        tickets = [writer.submit(tmp_path / "r0.json", b"{}")]
        assert inside.wait(10.0)  # the writer holds the first batch (one record) at the gate
        tickets += [writer.submit(tmp_path / f"r{n}.json", b"{}") for n in range(1, 50)]
        assert writer.room() == 100 - 49  # the 49 queued behind it count against the limit
        gate.set()
        assert writer.wait(tickets[-1])
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"r{n}.json" for n in range(50))
        assert writer.written == 50 and len(syncs) == writer.batches <= 2
        last = writer.submit(tmp_path / "r0.json", None)
        assert writer.wait(last) and not (tmp_path / "r0.json").exists()
    finally:
        gate.set()
        writer.close()


class _Counting(dict):
    """A dict that counts walks over all of it."""

    walks = 0

    def values(self):
        _Counting.walks += 1
        return super().values()

    def items(self):
        _Counting.walks += 1
        return super().items()

    def __iter__(self):
        _Counting.walks += 1
        return super().__iter__()


def test_admitting_joins_looks_nothing_up_by_walking_every_remote():
    """Was a finding: per-join scans over all records (keep.py, road.py)."""
    world = World(seed=56, delay=0.001)
    # No join budget here (joinbudget.py has its own tests): this counts walks.
    main = world.estate("main", policy="always", join_cookies="never", join_work_rate=1e6, join_source_rate=1e6)
    main.remotes, main._by_name, main.keep._remotes = _Counting(), _Counting(), _Counting()
    sender = world.net.port("sender")
    for n in range(60):
        sender.send(_join(LongTermKeys.generate(), f"e{n}", n + 1), "main")
        world.run_for(0.01)
    assert len(main.remotes) == 60 and main.keep.bound("e59") is not None  # find() is for operators: it scans
    assert _Counting.walks == 0
