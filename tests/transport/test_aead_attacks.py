"""The AEGIS-256 session cipher attacked through the API and the wire (an outside review's tests).

Everything runs on the simulated network on virtual time, except one test
on real loopback UDP (bounded by ``serve``'s timeout).  Each stack is made
with its offer, and hardware AES is taken as present (``HARDWARE_AES``
patched), so the tests mean the same on a machine without it.
"""

from __future__ import annotations

import os
import socket
from collections import Counter

import pytest

from flowcast.transport import crypto
from flowcast.transport.handshake import F_AEGIS
from flowcast.transport.stack import serve
from flowcast.transport.wire import HEADER, HEADER_SIZE, MAGIC, PING, ChunkKind, PacketKind

from .roadkit import World, udp_road_pair

CIPHERS = [pytest.param(True, id="aegis"), pytest.param(False, id="secretbox")]


@pytest.fixture(autouse=True)
def _hardware_aes(monkeypatch):
    monkeypatch.setattr("flowcast.transport.road.HARDWARE_AES", True)


def _restart_offering(stack, aegis: bool) -> None:
    """As if ``stack`` were restarted with the other offer (it is fixed for a stack's life)."""
    stack._aegis = aegis


def _pair(world: World, alpha_aegis: bool, beta_aegis: bool, **options):
    alpha, beta = world.estate("alpha", aegis=alpha_aegis, **options), world.estate("beta", aegis=beta_aegis, **options)
    alpha.join("beta")
    assert world.run_until(lambda: alpha.is_allowed("beta") and beta.is_allowed("alpha"), 10)
    return alpha, beta


def _tap(world: World, hook):
    original = world.net._send

    def tapped(data, src, dst):
        out = hook(data, src, dst)
        if out is not None:
            return original(out, src, dst)
        return None

    world.net._send = tapped
    return original


def _no_errors(*stacks):
    for stack in stacks:
        assert stack.counts["internal_errors"] == 0, dict(stack.counts)


# -- the offer: one flag, both ends ---------------------------------------------------


def test_the_offer_is_fixed_for_a_stacks_life(monkeypatch):
    """The review found a responder whose offer changed between its COOKIE and the INITIATE
    deciding on the new one while the initiator had the old: sessions of two ciphers, nothing
    opened until the allow timed out.  The offer cannot change now; a restart loses the cookie
    (its minute key is never kept), so the race has no other way in."""
    world = World(seed=71, delay=0.001)
    beta = world.estate("beta", aegis=True)
    with pytest.raises(AttributeError):
        beta.aegis = False
    assert world.estate("alpha").aegis is True  # the default: what this machine has
    monkeypatch.setattr("flowcast.transport.road.HARDWARE_AES", False)
    assert world.estate("gamma").aegis is False
    with pytest.raises(ValueError, match="hardware AES"):
        world.estate("delta", aegis=True)


@pytest.mark.parametrize("alpha_aegis, beta_aegis", [(True, False), (False, True), (True, True)])
def test_simultaneous_allow_with_mixed_offers_agrees(alpha_aegis, beta_aegis):
    world = World(seed=72, delay=0.002)
    alpha, beta = _pair(world, alpha_aegis, beta_aegis)
    alpha.allow("beta")
    beta.allow("alpha")
    world.run_for(0.5)
    assert world.run_until(lambda: alpha.is_allowed("beta") and beta.is_allowed("alpha"), 10)
    s, t = alpha.remote("beta").session, beta.remote("alpha").session
    assert s.aegis == t.aegis == (alpha_aegis and beta_aegis)
    assert s.tx_key == t.rx_key and s.rx_key == t.tx_key
    out = alpha.send_bytes(os.urandom(50_000), "beta")
    back = beta.send_bytes(os.urandom(50_000), "alpha")
    assert world.run_until(lambda: out.delivered and back.delivered, 10)
    _no_errors(alpha, beta)


@pytest.mark.parametrize("kind", [PacketKind.COOKIE, PacketKind.INITIATE])
@pytest.mark.parametrize("flip", [True, False])
def test_replayed_handshake_packets_after_the_session_change_nothing(kind, flip):
    """Copies of the COOKIE / INITIATE (with the offer flipped or not), replayed once the session stands."""
    world = World(seed=73, delay=0.001)
    alpha, beta = world.estate("alpha", aegis=True), world.estate("beta", aegis=True)
    captured = []

    def hook(data, src, dst):
        if data[1] == kind:
            captured.append((bytes(data), src, dst))
        return data

    original = _tap(world, hook)
    alpha.join("beta")
    assert world.run_until(lambda: alpha.is_allowed("beta") and beta.is_allowed("alpha"), 10)
    assert captured
    before = (alpha.remote("beta").session, beta.remote("alpha").session)
    for data, src, dst in captured * 3:
        data = bytearray(data)
        if flip:
            data[3] ^= F_AEGIS
        original(bytes(data), src, dst)
        original(bytes(data), "mallory", dst)
    world.run_for(1.0)
    assert (alpha.remote("beta").session, beta.remote("alpha").session) == before
    assert before[0].aegis and before[1].aegis
    out = alpha.send_bytes(b"after", "beta")
    assert world.run_until(lambda: out.delivered, 5)
    _no_errors(alpha, beta)


# -- the sealed datagram --------------------------------------------------------------


@pytest.mark.parametrize("aegis", CIPHERS)
def test_short_and_truncated_sealed_datagrams_are_counted_drops(aegis):
    """0..49 bytes (and truncations of a real datagram), on the quick path (spoofed source, right
    after an authentic datagram of the run) and the slow one: counted, never an exception."""
    world = World(seed=74, delay=0.001)
    alpha, beta = _pair(world, aegis, aegis)
    session = alpha.remote("beta").session
    index = session.remote_index
    _, real = session.seal(PING.pack(ChunkKind.PING, 0))
    port = world.net.port("mallory")
    start = Counter(beta.counts)
    sent = 0
    for n in range(0, 50):
        header = HEADER.pack(MAGIC, PacketKind.SEALED, 0, index, 10_000 + n)
        junk = (header + os.urandom(64))[:n]
        cut = real[:n]
        for data in (junk, cut):
            port.send(data, "beta")  # slow path
            # the quick path: an authentic datagram from alpha first, then the short one from "alpha"
            _, ok = session.seal(PING.pack(ChunkKind.PING, 0))
            beta._receive_batch([(ok, "alpha"), (data, "alpha")], world.scheduler.clock.now())
            sent += 2
    world.run_for(0.5)
    _no_errors(alpha, beta)
    counted = sum(beta.counts[k] - start[k] for k in ("unauthentic", "malformed", "replayed", "unknown_session"))
    assert counted >= sent - 4  # every one counted somewhere (the two 16..-byte copies of the real header replay)
    out = alpha.send_bytes(b"still fine", "beta")
    assert world.run_until(lambda: out.delivered, 5)


@pytest.mark.parametrize("aegis", CIPHERS)
def test_an_authentic_empty_body_is_harmless(aegis):
    """Exactly header + tag (48 bytes AEGIS, 32 secretbox): opens to an empty body."""
    world = World(seed=75, delay=0.001)
    alpha, beta = _pair(world, aegis, aegis)
    session = alpha.remote("beta").session
    for _ in range(3):
        _, data = session.seal(b"")
        assert len(data) == HEADER_SIZE + (crypto.AEGIS_TAG if aegis else crypto.MAC_SIZE)
        world.net._send(data, "alpha", "beta")
    world.run_for(0.2)
    _no_errors(alpha, beta)
    assert beta.counts["unauthentic"] == 0
    out = alpha.send_bytes(b"ok", "beta")
    assert world.run_until(lambda: out.delivered, 5)


@pytest.mark.parametrize("aegis", CIPHERS)
def test_a_datagram_sealed_with_the_other_cipher_never_opens(aegis):
    """Even under the very key the receiver holds (a key made for one cipher used with the other)."""
    world = World(seed=76, delay=0.001)
    alpha, beta = _pair(world, aegis, aegis)
    s = alpha.remote("beta").session
    key = s.tx_key
    body = PING.pack(ChunkKind.PING, 0)
    for i, size in enumerate((0, 1, 16, 100, 2100)):
        header = HEADER.pack(MAGIC, PacketKind.SEALED, 0, s.remote_index, 50_000 + i)
        payload = body + b"\0" * size
        other = crypto.seal(key, header, payload) if aegis else crypto.seal_aegis(key, header, payload)
        world.net._send(other, "alpha", "beta")
    world.run_for(0.2)
    assert beta.counts["unauthentic"] == 5
    _no_errors(alpha, beta)


@pytest.mark.parametrize("aegis", CIPHERS)
def test_session_open_around_the_scratch_boundary(aegis):
    """Bodies either side of SCRATCH_SIZE: open_fresh returns the body, refuses any altered bit,
    and a failed open leaves the replay window alone."""
    from flowcast.transport.session import Session

    class _Link:  # open/seal never touch the link
        pass

    key1, key2 = os.urandom(32), os.urandom(32)
    tx = Session(1, 2, key1, key2, _Link(), initiator=True, client_short=b"", created=0.0, aegis=aegis)
    rx = Session(2, 1, key2, key1, _Link(), initiator=False, client_short=b"", created=0.0, aegis=aegis)
    for size in (0, 1, 2000, 2015, 2016, 2017, 2031, 2032, 2033, 2047, 2048, 2049, 4096, 70_000):
        body = os.urandom(size)
        counter, data = tx.seal(body)
        for view in (memoryview(data), bytearray(data)):
            assert rx.open_fresh(bytes(data[:-1]), counter) is None
            bad = bytearray(data)
            bad[-1] ^= 1
            assert rx.open_fresh(bytes(bad), counter) is None
            assert rx.open_fresh(type(view)(bad), counter) is None
        assert rx.window.check(counter)
        assert bytes(rx.open(data, counter)) == body
        assert rx.open(data, counter) is None  # replay
        assert tx.seal(memoryview(body))[1][HEADER_SIZE:] != data[HEADER_SIZE:]  # next counter, new nonce


@pytest.mark.parametrize("aegis", CIPHERS)
@pytest.mark.parametrize("limit, how", [(1232, "datagram_size"), (1232, "mtu"), (512, "datagram_size"), (2100, "datagram_size")])
def test_no_datagram_exceeds_the_size_under_either_cipher(aegis, limit, how):
    world = World(seed=77, delay=0.001, **({"max_datagram": limit} if how == "mtu" else {}))
    options = {"datagram_size": limit} if how == "datagram_size" else {}
    sizes = []
    # sealed ones (a JOIN is 641 bytes whatever the size: handshakes are not cut, and not this change's)
    _tap(world, lambda data, src, dst: (data[1] == PacketKind.SEALED and sizes.append(len(data))) or data)
    alpha, beta = _pair(world, aegis, aegis, **options)
    assert alpha.remote("beta").session.aegis is aegis
    outs = [alpha.send_bytes(os.urandom(n), "beta") for n in (1, 200, limit - 100, limit, 30_000, 100_000)]
    outs += [beta.send_bytes(os.urandom(n), "alpha") for n in (1, limit - 60, limit - 40, 60_000)]
    assert world.run_until(lambda: all(o.delivered for o in outs), 30)
    assert max(sizes) <= limit
    _no_errors(alpha, beta)


# -- sessions replaced mid-transfer ---------------------------------------------------


@pytest.mark.parametrize("first, second", [(True, False), (False, True)])
def test_a_reallow_that_changes_the_cipher_mid_transfer_delivers_each_message_whole_once(first, second):
    world = World(seed=78, delay=(0.01, 0.03), loss=0.02)
    alpha, beta = _pair(world, first, first, datagram_size=1232)
    old = alpha.remote("beta").session
    assert old.aegis is first
    payloads = [os.urandom(n) for n in (100, 5_000, 1_500_000, 1_000_000, 40)]
    sent = {p: alpha.send_bytes(p, "beta") for p in payloads}
    sent.update({p: beta.send_bytes(p, "alpha") for p in [os.urandom(1_000_000), os.urandom(700)]})
    world.run_for(0.1)  # some of it on the wire
    _restart_offering(alpha, second)
    _restart_offering(beta, second)
    alpha.allow("beta")
    headers = Counter()

    def hook(data, src, dst):
        if data[1] == PacketKind.SEALED:
            headers[(src, data[:HEADER_SIZE])] += 1
        return data

    _tap(world, hook)
    assert world.run_until(lambda: alpha.remote("beta").session is not old and alpha.is_allowed("beta"), 10)
    assert not all(o.delivered for o in sent.values()), "the test wants messages in flight across the change"
    assert world.run_until(lambda: all(o.delivered for o in sent.values()), 60), dict(alpha.counts)
    new = alpha.remote("beta").session
    assert new is not old and new.aegis is second and beta.remote("alpha").session.aegis is second
    got = Counter()
    for stack in (alpha, beta):
        while (m := stack.receive()) is not None:
            got[bytes(m.data)] += 1
    assert got == Counter(sent.keys()), "a message lost, cut or delivered twice"
    # nonces: the network carried no sealed header twice from one sender (retransmits are new counters)
    assert max(headers.values()) == 1
    _no_errors(alpha, beta)


def test_old_session_datagrams_after_a_cipher_change_are_dropped():
    """A datagram of the old (AEGIS) session delayed past a re-allow to secretbox: unknown, not opened."""
    world = World(seed=79, delay=0.001)
    alpha, beta = _pair(world, True, True)
    old = alpha.remote("beta").session
    _, stale = old.seal(PING.pack(ChunkKind.PING, 0))
    _restart_offering(alpha, False)
    alpha.allow("beta")
    assert world.run_until(lambda: alpha.remote("beta").session is not old and alpha.is_allowed("beta"), 10)
    world.run_for(0.2)
    assert not alpha.remote("beta").session.aegis and not beta.remote("alpha").session.aegis
    before = Counter(beta.counts)
    world.net._send(stale, "alpha", "beta")
    world.run_for(0.1)
    assert beta.counts["unknown_session"] + beta.counts["unauthentic"] > before["unknown_session"] + before["unauthentic"]
    _no_errors(alpha, beta)


# -- real loopback UDP ---------------------------------------------------------------


def test_real_udp_short_datagrams_and_a_transfer():
    alpha, beta = udp_road_pair()
    try:
        session = alpha.remote("beta").session
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            for n in range(0, 50):
                header = HEADER.pack(MAGIC, PacketKind.SEALED, 0, session.remote_index, 90_000 + n)
                sock.sendto((header + bytes(64))[:n], beta.address[:2])
        finally:
            sock.close()
        out = alpha.send_bytes(os.urandom(300_000), "beta")
        assert serve([alpha, beta], until=lambda: out.delivered, timeout=10)
        assert len(beta.receive().data) == 300_000
        _no_errors(alpha, beta)
        assert beta.counts["unauthentic"] + beta.counts["malformed"] >= 48
    finally:
        alpha.close()
        beta.close()
