"""A road stack with many remotes: per-remote deadlines in a heap, work per wake bounded.

The hub keeps each remote's next deadline in a heap (stale entries dropped
lazily) and only recomputes the remotes something touched; these tests hold
it to the brute-force answer and count what an idle wake does.
"""

from __future__ import annotations

import pytest

from flowcast.transport.presence import Presence
from tests.transport.roadkit import World


def _hub(count: int, seed: int = 3):
    world = World(seed=seed)
    hub = world.estate("hub")
    remotes = []
    for i in range(count):
        road = world.estate(f"r{i}")
        road.join("hub")
        remotes.append(road)
        world.run_for(1.0 / count)  # heartbeats spread over a second, as on a real network
    assert world.run_until(lambda: all(r.is_allowed("hub") and hub.is_allowed(r.local.name) for r in remotes), 60, 0.25)
    return world, hub, remotes


def _brute(hub) -> float | None:
    """The earliest deadline of any remote, found by looking at all of them (the old way)."""
    whens = [hub._due.remote_deadline(r) for r in hub.remotes.values()]
    whens += [min(a.next_send, a.deadline) for a in hub._joins.attempts.values()]
    whens = [w for w in whens if w is not None]
    return min(whens) if whens else None


def test_heap_deadline_agrees_with_scanning_every_remote_while_deadlines_move():
    world, hub, remotes = _hub(12)
    for step in range(40):
        if step % 7 == 0:
            hub.send({"n": step}, remotes[step % len(remotes)].local.name, timeout=0.3 + step / 100)
        if step % 11 == 0:
            remotes[step % len(remotes)].send({"n": step}, "hub")
        world.run_for(0.037)
        assert hub.next_deadline() == _brute(hub)
        assert hub.next_deadline() > world.scheduler.clock.now() - 1e-3  # nothing overdue is left waiting


def test_a_remote_whose_deadline_moves_earlier_is_served_then_not_before_it_is_due():
    world, hub, remotes = _hub(5)
    world.run_for(0.5)
    target = hub.remote("r2")
    # a message with a short timeout to a remote that is gone: its deadline comes first
    remotes[2].close()
    sent_at = world.scheduler.clock.now()
    msg = hub.send({"x": 1}, "r2", timeout=0.2)
    assert hub.next_deadline() <= sent_at + 0.2
    assert world.run_until(lambda: msg.done, 2.0, 0.01)
    assert world.scheduler.clock.now() <= sent_at + 0.2 + 0.02  # on time, not at a later heartbeat
    assert msg.state == "failed"
    assert "timeout" in msg.reason
    # the later entries of that remote are still right: it is declared dead on time
    assert world.run_until(lambda: target.presence is Presence.DEAD, 5.0, 0.05)
    assert hub.next_deadline() == _brute(hub)


def test_a_dropped_remote_leaves_no_live_entry_behind():
    world, hub, remotes = _hub(3)
    remote = hub.remote("r1")
    assert remote.record.pubkey in hub._long_shared  # r1 initiated: the hub cached its key agreement
    hub.next_deadline()
    assert remote.due is not None
    session = remote.session
    remote.session = None  # only remotes without a session are dropped (a key eviction)
    hub._table.drop(remote.fingerprint)
    remote.session = session
    assert remote.due is None
    assert remote not in hub._dirty and remote not in hub._flushq
    assert remote.record.pubkey not in hub._long_shared  # its cached key agreement goes too
    assert all(entry[2] is not remote for entry in hub._due.heap if entry[2].due == entry[0])
    hub._timers(world.scheduler.clock.now() + 10)  # nothing runs for it
    assert remote.due is None


def test_stale_heap_entries_are_compacted():
    world, hub, remotes = _hub(4)
    remote = hub.remote("r0")
    for i in range(500):  # a deadline moving earlier and earlier leaves stale entries above it
        remote.last_ping -= 0.001
        hub._dirty[remote] = None
        hub.next_deadline()
    assert len(hub._due.heap) <= 2 * len(hub.remotes) + 64 + 1
    assert hub.next_deadline() == _brute(hub)


@pytest.mark.parametrize("count", [40, 160])
def test_idle_work_per_wake_does_not_grow_with_the_remotes(count, monkeypatch):
    """Counted, not timed: recomputed deadlines and remote timer runs per wake stay small."""
    world, hub, remotes = _hub(count)
    world.run_for(2.0)
    calls = {"deadline": 0, "timers": 0, "wakes": 0}
    remote_deadline, remote_timers, service = hub._due.remote_deadline, hub._due.remote_timers, hub.service

    def counted_deadline(remote):
        calls["deadline"] += 1
        return remote_deadline(remote)

    def counted_timers(remote, now):
        calls["timers"] += 1
        return remote_timers(remote, now)

    def counted_service():
        calls["wakes"] += 1
        return service()

    monkeypatch.setattr(hub._due, "remote_deadline", counted_deadline)
    monkeypatch.setattr(hub._due, "remote_timers", counted_timers)
    monkeypatch.setattr(hub, "service", counted_service)
    seconds = 3.0
    world.run_for(seconds)
    assert all(hub.presence(r.local.name) is Presence.ALIVE for r in remotes)
    wakes = calls["wakes"]
    assert wakes >= count * seconds  # a heartbeat a second each way at least
    # Each remote is looked at a few times per heartbeat, however many remotes there are:
    # per wake a constant, per second linear in the remotes.
    assert calls["deadline"] / wakes <= 2
    assert calls["timers"] / wakes <= 1
    assert calls["deadline"] / (count * seconds) < 8


def test_idle_remote_state_is_small_stream_queues_go_once_delivered_and_sequence_numbers_go_on():
    world = World(seed=5)
    alpha, beta = world.pair()
    link = alpha.remote("beta").session.link
    assert not hasattr(link, "__dict__")  # slots: no instance dict per remote
    assert len(alpha.remote("beta").session.window.seen) == 512  # a bit per counter
    assert alpha.remote("beta").session.scratch is alpha._scratch  # one buffer per stack
    first = alpha.send({"n": 1}, "beta", stream=7, timeout=5.0)
    assert world.run_until(lambda: first.delivered, 5)
    assert link.unfinished == {} and link._latest_deadline == {}
    second = alpha.send({"n": 2}, "beta", stream=7, timeout=5.0)
    assert second.seq == first.seq + 1  # the stream's numbering is kept, its queue is not
    assert world.run_until(lambda: second.delivered, 5)
    got = [m.data["n"] for m in beta.receive_many()]
    assert got == [1, 2]
    assert link.unfinished == {}


def test_send_queues_are_made_when_needed_and_let_go_when_quiet():
    world = World(seed=6)
    alpha, beta = world.pair()
    link = alpha.remote("beta").session.link
    world.run_for(1.5)
    assert not link.fresh and not link.resend
    assert link.fresh == () and link.resend == ()  # no deque held while idle
    msg = alpha.send({"n": 1}, "beta")
    assert len(link.fresh) == 1
    assert world.run_until(lambda: msg.delivered, 5)
    world.run_for(2.5)  # a heartbeat or two with nothing to send
    assert link.fresh == () and link.resend == ()
    # losses and failures make the resend queue again when they need it
    world.net.partition(["alpha"], ["beta"])
    lost = alpha.send({"n": 2}, "beta", timeout=0.5, retries=1)
    assert world.run_until(lambda: lost.done, 5)
    assert lost.state == "failed"
    world.net.heal()
    again = alpha.send({"n": 3}, "beta")
    assert world.run_until(lambda: again.delivered, 10)
    assert [m.data["n"] for m in beta.receive_many()] == [1, 3]


def test_a_starved_sender_resumes_when_the_application_takes_its_messages():
    """Only remotes that advertised a small window are told it opened (not a loop over all)."""
    world = World(seed=7)
    alpha = world.estate("alpha")
    beta = world.estate("beta", receive_window=64 * 1024)
    bystanders = [world.estate(f"b{i}") for i in range(5)]
    alpha.join("beta")
    for b in bystanders:
        b.join("beta")
    assert world.run_until(lambda: alpha.is_allowed("beta") and all(b.is_allowed("beta") for b in bystanders), 20)
    sent = [alpha.send_bytes(bytes([i]) * 16000, "beta") for i in range(24)]
    world.run_for(2.0)
    assert not all(m.delivered for m in sent)  # beta's application reads nothing: alpha is held back
    assert beta.remote("alpha") in beta._starved  # (and whoever else got an ACK meanwhile: the window is the stack's)
    got = []
    assert world.run_until(lambda: got.extend(beta.receive_many()) or all(m.delivered for m in sent), 30, 0.05)
    got.extend(beta.receive_many())
    assert [m.data[0] for m in got] == list(range(24))
    world.run_for(1.5)
    assert not beta._starved  # told, and what they advertise since is the whole window
