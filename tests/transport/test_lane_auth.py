"""Authenticated lanes (LaneStack(keys=...)): a socket path is not an identity.

A process of the same user can bind a yard's socket path -- a free one, or
one it unlinked from under the live yard -- and before lane keys it was
heard as that yard (and as the manor).  These tests play that process with
real Unix sockets (and, once, a separate process) and check that it is
refused and counted, that copies and altered datagrams are counted drops,
and that an authenticated acknowledged lane still survives a restart.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flowcast.transport.lane import LaneStack
from flowcast.transport.lanekeys import TRAILER_SIZE, LaneKeys, new_secret, pair_key
from flowcast.transport.ports import UxdPort
from flowcast.transport.stack import serve

ROOT = Path(__file__).resolve().parents[2]
YARDS = ["manor", "w1", "w2"]


def _stack(run, secret: bytes, name: str, peers=YARDS, **options) -> LaneStack:
    keys = LaneKeys.derive(secret, name, peers)
    return LaneStack(UxdPort(run, name), name, {p: os.path.join(run, p) for p in peers if p != name}, keys=keys, **options)


def _impostor(path: str, *, unlink: bool = False) -> socket.socket:
    """A plain socket bound at ``path``: what any process of this user can do."""
    if unlink and os.path.exists(path):
        os.unlink(path)  # the live yard keeps its descriptor, but the path is ours now
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    return sock


def _inject(sock: socket.socket, datagrams: list[bytes], to: LaneStack) -> None:
    """Send ``datagrams`` to ``to`` from ``sock``, letting ``to`` read as they go.

    A Unix datagram socket queues only a few datagrams (net.unix.max_dgram_qlen)
    before a sender blocks.
    """
    for datagram in datagrams:
        sock.sendto(datagram, to.address)
        to.service()


def _refusals(stack: LaneStack) -> int:
    c = stack.counts
    return c["lane_forged"] + c["lane_unauthenticated"] + c["lane_replayed"]


@pytest.mark.parametrize("acks", [False, True])
def test_yards_with_keys_talk_and_the_trailer_is_on_every_datagram(tmp_path, acks):
    run = tmp_path / "run"
    secret = new_secret()
    a, b = _stack(run, secret, "manor", acks=acks), _stack(run, secret, "w1", acks=acks)
    sent: list[bytes] = []
    send = a.port.send
    a.port.send = lambda data, address: sent.append(data) or send(data, address)  # type: ignore[method-assign]
    try:
        big = os.urandom(200_000)
        outs = [a.send({"n": i}, "w1") for i in range(300)] + [a.send_bytes(big, "w1")]
        got = []
        final = "delivered" if acks else "sent"
        assert serve([a, b], until=lambda: got.extend(b.receive_many()) or (len(got) == len(outs) and all(o.state == final for o in outs)), timeout=10)
        assert [m.data for m in got[:-1]] == [{"n": i} for i in range(300)] and got[-1].data == big
        assert _refusals(a) == _refusals(b) == 0 and a.authenticated and b.authenticated
        assert sent and all(len(d) > TRAILER_SIZE and d[2:4] in (b"\x00\x02", b"\x00\x03") for d in sent)
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("live", [False, True], ids=["free-path", "live-socket-replaced"])
def test_a_socket_bound_at_a_yard_path_is_refused_as_that_yard_and_as_the_manor(tmp_path, live):
    run = tmp_path / "run"
    secret = new_secret()
    w1 = _stack(run, secret, "w1", acks=True)
    stacks = [w1]
    if live:
        stacks += [_stack(run, secret, "manor", acks=True), _stack(run, secret, "w2", acks=True)]
        stacks[1].send({"real": 1}, "w1")
        assert serve(stacks, until=lambda: len(w1.inbox) == 1, timeout=5)
        w1.receive()
    try:
        for yard, other in (("manor", "w2"), ("w2", "manor")):
            path = os.path.join(run, yard)
            # Unkeyed; keyed from a secret of its own; and holding the other
            # house's real keys with w1 (a house posing as another).
            own = LaneKeys.derive(new_secret(), yard, YARDS)
            stolen = LaneKeys.derive(secret, other, YARDS)
            for keys in (None, own, LaneKeys(yard, {"w1": stolen.send["w1"]}, {"w1": stolen.hear["w1"]})):
                if os.path.exists(path):
                    os.unlink(path)  # a live yard keeps its descriptor; the path is the intruder's now
                if keys is not None:
                    keys = LaneKeys(yard, {"w1": keys.send["w1"]}, {"w1": keys.hear["w1"]})
                fake = LaneStack(UxdPort(run, yard), yard, {"w1": w1.address}, acks=True, keys=keys)
                stacks.append(fake)
                fake.send({"as": yard}, "w1")
                before = _refusals(w1)
                assert serve([fake, w1], until=lambda: _refusals(w1) > before, timeout=5)
                fake.close()
        assert w1.receive() is None, "an impostor's message was delivered"
        assert w1.counts["lane_unauthenticated"] >= 2 and w1.counts["lane_forged"] >= 4
        assert w1.counts["internal_errors"] == 0
    finally:
        for stack in stacks:
            stack.close()


def test_another_process_replacing_the_manor_socket_is_not_heard_as_the_manor(tmp_path):
    run = tmp_path / "run"
    secret = new_secret()
    manor, w1 = _stack(run, secret, "manor", acks=True), _stack(run, secret, "w1", acks=True)
    manor.send({"n": 0}, "w1")
    assert serve([manor, w1], until=lambda: len(w1.inbox) == 1, timeout=5)
    w1.receive()
    script = (
        "import os, sys\n"
        "from flowcast.transport.lane import LaneStack\n"
        "from flowcast.transport.ports import UxdPort\n"
        "from flowcast.transport.stack import serve\n"
        "run = sys.argv[1]\n"
        "os.unlink(os.path.join(run, 'manor'))\n"
        "lane = LaneStack(UxdPort(run, 'manor'), 'manor', {'w1': os.path.join(run, 'w1')}, acks=True)\n"
        "lane.send({'evil': 1}, 'w1')\n"
        "serve([lane], timeout=0.3)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-c", script, str(run)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        end = time.monotonic() + 15
        while proc.poll() is None and time.monotonic() < end:  # w1 reads while the intruder runs
            serve([w1, manor], timeout=0.05)
        assert serve([w1, manor], until=lambda: _refusals(w1) > 0, timeout=5)
        out = proc.communicate(timeout=5)[0].decode()
        assert proc.returncode == 0, out
        assert w1.receive() is None and w1.counts["lane_unauthenticated"] >= 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        manor.close()
        w1.close()


def test_copies_reflections_and_altered_datagrams_are_counted_drops(tmp_path):
    run = tmp_path / "run"
    secret = new_secret()
    a, b = _stack(run, secret, "manor"), _stack(run, secret, "w1")
    sent: list[bytes] = []
    send = a.port.send
    a.port.send = lambda data, address: sent.append(data) or send(data, address)  # type: ignore[method-assign]
    try:
        for i in range(20):
            a.send({"n": i}, "w1")
            a.flush()
        assert serve([a, b], until=lambda: len(b.inbox) == 20, timeout=5)
        b.receive_many()
        assert len(sent) >= 2
        # the manor's path, taken over: its datagrams sent again, altered, cut
        relay = _impostor(a.address, unlink=True)
        _inject(relay, sent, b)
        assert serve([b], until=lambda: b.counts["lane_replayed"] == len(sent), timeout=5)
        for datagram in sent[:3]:
            flipped = bytearray(datagram)
            flipped[len(datagram) // 2] ^= 0x40
            # altered; cut short; stripped of its MAC
            _inject(relay, [bytes(flipped), datagram[:-1], datagram[: len(datagram) - TRAILER_SIZE]], b)
        assert serve([b], until=lambda: b.counts["lane_forged"] >= 9, timeout=5)
        assert b.receive() is None and b.counts["internal_errors"] == 0
        relay.close()
        # w1's path, taken over: what the manor sent to w1 reflected back to
        # the manor (a restarted one: the first's path is the relay's now)
        a.close()
        os.unlink(a.address)
        a = _stack(run, secret, "manor")
        mirror = _impostor(b.address, unlink=True)
        _inject(mirror, sent[:3], a)
        assert serve([a], until=lambda: a.counts["lane_forged"] == 3, timeout=5), dict(a.counts)
        assert a.receive() is None and a.counts["lane_replayed"] == 0  # refused on the tag, before its seq is read
        mirror.close()
        # a datagram sealed before the receiver started is never accepted by it
        b.close()
        os.unlink(b.address)
        b = _stack(run, secret, "w1")
        relay = _impostor(a.address, unlink=True)
        _inject(relay, [sent[-1]], b)
        assert serve([b], until=lambda: b.counts["lane_replayed"] == 1, timeout=5)
        assert b.receive() is None
        relay.close()
    finally:
        a.close()
        b.close()


def test_an_authenticated_acknowledged_lane_survives_a_restart(tmp_path):
    run = tmp_path / "run"
    secret = new_secret()
    a, b = _stack(run, secret, "manor", acks=True), _stack(run, secret, "w1", acks=True)
    outs = [a.send({"n": i}, "w1") for i in range(300)]
    first: list[int] = []
    assert serve([a, b], until=lambda: first.extend(m.data["n"] for m in b.receive_many()) or len(first) >= 300, timeout=10)
    # The rest leaves the manor but w1 never reads it: it dies with it in its socket, unacknowledged.
    outs += [a.send({"n": i}, "w1") for i in range(300, 2000)]
    for _ in range(20):
        a.service()
    b.close()
    b = _stack(run, secret, "w1", acks=True)  # same keys: the supervisor hands them again
    second: list[int] = []
    try:
        assert serve([a, b], until=lambda: second.extend(m.data["n"] for m in b.receive_many()) or all(o.state == "delivered" for o in outs), timeout=20)
        assert sorted(first) == list(range(300))
        assert set(second) >= set(range(300, 2000)) and second == sorted(second)
        assert a.counts["yard_restarts"] == 1 and _refusals(a) == _refusals(b) == 0
    finally:
        a.close()
        b.close()


def test_keyed_and_unkeyed_yards_do_not_talk_and_say_why(tmp_path):
    run = tmp_path / "run"
    keyed = _stack(run, new_secret(), "manor", peers=["manor", "w1"])
    plain = LaneStack(UxdPort(run, "w1"), "w1", {"manor": keyed.address})
    try:
        keyed.send({"x": 1}, "w1")
        plain.send({"y": 1}, "manor")
        assert serve([keyed, plain], until=lambda: plain.counts["lane_auth_mismatch"] and keyed.counts["lane_unauthenticated"], timeout=5)
        assert keyed.receive() is None and plain.receive() is None
    finally:
        keyed.close()
        plain.close()


def test_lane_keys_are_per_pair_and_per_direction():
    secret = new_secret()
    w1 = LaneKeys.derive(secret, "w1", YARDS)
    manor = LaneKeys.derive(secret, "manor", YARDS)
    assert sorted(w1.yards) == ["manor", "w2"]
    assert w1.send["manor"] == manor.hear["w1"] == pair_key(secret, "w1", "manor")
    assert w1.send["manor"] != w1.hear["manor"]
    assert len({*w1.send.values(), *w1.hear.values(), *manor.send.values(), *manor.hear.values()}) == 6
    assert pair_key(secret, "ab", "c") != pair_key(secret, "a", "bc")
    assert LaneKeys.from_json(w1.to_json()).send == w1.send
    assert secret.hex() not in repr(w1) and w1.send["manor"].hex() not in repr(w1)
    with pytest.raises(ValueError):
        LaneKeys("w1", {"manor": b"short"}, {"manor": b"short"})


def test_a_stack_takes_only_its_own_keys_and_yards_they_name(tmp_path):
    keys = LaneKeys.derive(new_secret(), "w1", YARDS)
    port = UxdPort(tmp_path, "w2")
    with pytest.raises(ValueError, match="not 'w2'"):
        LaneStack(port, "w2", keys=keys)
    port.close()
    lane = LaneStack(UxdPort(tmp_path, "w1"), "w1", keys=keys)
    try:
        with pytest.raises(ValueError, match="no lane key for yard 'w9'"):
            lane.add_yard("w9", str(tmp_path / "w9"))
        lane.add_yard("w2", str(tmp_path / "w2"))
        assert lane.yards == ["w2"]
    finally:
        lane.close()
