"""Adversarial tests: an attacker with a socket, and a hostile joined estate.

Each test states a property that must hold and attacks it.  A passing test
documents a defended attack; every attack that once worked is kept here as
a regression test whose docstring says what the finding was.  Everything runs on the simulated network and virtual clock;
"capture" is a tap on the network's send path, which sees every datagram
before it is delivered (what an on-path observer sees).
"""

from __future__ import annotations

import os
import random
import select
import socket
import stat
import tracemalloc

import pytest

from flowcast.transport import handshake as hs
from flowcast.transport.crypto import LongTermKeys
from flowcast.transport.keep import MAX_PENDING, Keep, RemoteRecord, Status
from flowcast.transport.presence import Presence
from flowcast.transport.stack import serve
from flowcast.transport.wire import ACK, ACK_STREAM, ACK_RANGE, HEADER_SIZE, MSG, PING, SEG, SKIP, ChunkKind, PacketKind, pack_header

from .roadkit import World, udp_roads


# -- helpers -------------------------------------------------------------------


class Tap:
    """Sees every datagram the simulated network is asked to carry, before delivery."""

    def __init__(self, world: World) -> None:
        self.seen: list[tuple[object, object, bytes]] = []
        self.hooks: list = []
        net = world.net
        original = net._send

        def tapped(data, source, destination):
            self.seen.append((source, destination, data))
            for hook in list(self.hooks):
                hook(data, source, destination)
            original(data, source, destination)

        net._send = tapped

    def kind(self, kind: int, source=None, destination=None) -> list[bytes]:
        return [
            d
            for s, dd, d in self.seen
            if len(d) >= 2 and d[1] == kind and (source is None or s == source) and (destination is None or dd == destination)
        ]


def session_state(stack, name):
    remote = stack.remote(name)
    s = remote.session
    return (remote.record.fingerprint, s.local_index, s.remote_index, s.tx_key, s.rx_key, remote.address)


class ForeignKeys:
    """Signs with one estate's Ed25519 key while presenting any X25519 public key."""

    def __init__(self, signer: LongTermKeys, pubkey: bytes) -> None:
        self._signer = signer
        self.verkey = signer.verkey
        self.pubkey = pubkey

    def sign(self, message: bytes) -> bytes:
        return self._signer.sign(message)


def inject_sealed(stack, remote_name: str, body: bytes) -> None:
    """A hostile but joined estate: seal any body in its real session and send it."""
    remote = stack.remote(remote_name)
    _, datagram = remote.session.seal(body)
    stack.port.send(datagram, remote.address)


# == 1. forged and unauthenticated datagrams ====================================


def test_forged_sealed_datagrams_with_real_ids_and_every_header_bit_flip_change_nothing():
    world = World(seed=101, delay=0.001)
    tap = Tap(world)
    alpha, beta = world.pair()
    out = alpha.send({"n": 1}, "beta")
    assert world.run_until(lambda: out.delivered, 5)
    before = session_state(beta, "alpha")
    highest = beta.remote("alpha").session.window.highest
    real = tap.kind(PacketKind.SEALED, "alpha", "beta")[-1]
    mallory = world.net.port("mallory")
    rng = random.Random(3)
    forged = []
    # every single-bit flip of the header and of the first/last body bytes of a real datagram
    for bit in range(8 * HEADER_SIZE):
        flipped = bytearray(real)
        flipped[bit // 8] ^= 1 << (bit % 8)
        forged.append(bytes(flipped))
    for pos in (HEADER_SIZE, HEADER_SIZE + 1, len(real) - 1):
        flipped = bytearray(real)
        flipped[pos] ^= 0x80
        forged.append(bytes(flipped))
    # forged "alive / ack / nack / close" bodies under the real session id, all counters
    for counter in (0, highest, highest + 1, highest + 4096, 2**64 - 1):
        for body in (PING.pack(ChunkKind.PING, 0), b"\x07\x00", ACK.pack(ChunkKind.ACK, 0, 0, 0, 0)):
            forged.append(real[:8] + counter.to_bytes(8, "big") + body + rng.randbytes(16))
    for data in forged:
        mallory.send(data, "beta")
    world.run_for(0.5)
    assert session_state(beta, "alpha") == before
    assert beta.remote("alpha").session.window.highest >= highest
    assert beta.counts["internal_errors"] == 0
    b = beta.send({"back": 1}, "alpha")
    a = alpha.send({"again": 1}, "beta")
    assert world.run_until(lambda: a.delivered and b.delivered, 5)


def test_forged_cookie_with_a_captured_tag_is_dropped_and_the_allow_completes():
    world = World(seed=102, delay=0.005)
    tap = Tap(world)
    alpha = world.estate("alpha")
    beta = world.estate("beta")
    mallory = world.net.port("mallory")
    rng = random.Random(4)

    def race_cookie(data, source, destination):
        if source == "alpha" and data[1] == PacketKind.HELLO:
            tag = data[4:8]
            for _ in range(3):
                body = rng.randbytes(16 + 32 + hs.COOKIE_SIZE)
                mallory.send(pack_header(PacketKind.COOKIE, 0, int.from_bytes(tag, "big"), 1) + body, "alpha")

    tap.hooks.append(race_cookie)
    alpha.join("beta")
    assert world.run_until(lambda: alpha.is_allowed("beta") and beta.is_allowed("alpha"), 10)
    assert alpha.counts["bad_cookie"] >= 3
    assert session_state(alpha, "beta")[0] == beta.keys.fingerprint


def test_replayed_initiate_within_cookie_lifetime_changes_nothing():
    world = World(seed=103, delay=0.001)
    tap = Tap(world)
    alpha, beta = world.pair()
    initiates = tap.kind(PacketKind.INITIATE, "alpha", "beta")
    assert initiates
    before = session_state(beta, "alpha")
    mallory = world.net.port("mallory")
    for _ in range(3):
        for data in initiates:
            mallory.send(data, "beta")
        world.run_for(10.0)  # well inside the 120 s a cookie can open
    assert session_state(beta, "alpha") == before
    assert beta.counts["replayed"] + beta.counts["initiate_repeat"] >= 3
    out = alpha.send({"still": "fine"}, "beta")
    assert world.run_until(lambda: out.delivered, 5)


def test_initiate_vouching_with_another_estates_long_term_key_is_refused():
    """Mallory (accepted) tries to get a session under alpha's long-term key."""
    world = World(seed=104, delay=0.001)
    alpha, beta = world.pair()
    before = session_state(beta, "alpha")
    mallory = world.estate("mallory")
    mallory.join("beta")
    assert world.run_until(lambda: beta.is_allowed("mallory"), 10)
    port = world.net.port("mallory-raw")
    short = hs.ShortTerm()
    port.send(hs.build_hello(short, beta.keys.pubkey, 77), "beta")
    world.run_for(0.05)
    server_short, cookie, _ = hs.open_cookie(port.receive()[0], short, beta.keys.pubkey)
    # the inner box claims C = alpha's key; the vouch is made with mallory's secret
    forged = ForeignKeys(mallory.keys, alpha.keys.pubkey)
    forged.shared = mallory.keys.shared  # type: ignore[attr-defined]
    port.send(hs.build_initiate(short, forged, beta.keys.pubkey, server_short, cookie, 77, 4242), "beta")
    world.run_for(0.5)
    assert beta.counts["bad_vouch"] == 1
    assert session_state(beta, "alpha") == before


# == 2. replay ======================================================================


def test_replayed_datagrams_never_make_a_dead_remote_look_alive():
    world = World(seed=105, delay=0.001)
    tap = Tap(world)
    alpha, beta = world.pair()
    outs = [alpha.send({"n": i}, "beta") for i in range(5)]
    assert world.run_until(lambda: all(o.delivered for o in outs), 5)
    captured = tap.kind(PacketKind.SEALED, "alpha", "beta") + tap.kind(PacketKind.INITIATE, "alpha", "beta")
    alpha.close()  # alpha goes silent
    assert world.run_until(lambda: beta.presence("alpha") is Presence.DEAD, 10)
    heard = beta.remote("alpha").last_heard
    mallory = world.net.port("mallory")
    for _ in range(5):
        for data in captured:
            mallory.send(data, "beta")
        world.run_for(1.0)
        assert beta.presence("alpha") is Presence.DEAD
    assert beta.remote("alpha").last_heard == heard
    assert beta.remote("alpha").address == "alpha"
    beta.receive_many()
    assert beta.receive() is None


def test_session_keys_are_fresh_across_re_allows_and_restarts():
    world = World(seed=106, delay=0.001)
    keep_a, keep_b = Keep(None), Keep(None)
    alpha = world.estate("alpha", keep=keep_a)
    beta = world.estate("beta", keep=keep_b)
    alpha.join("beta")
    assert world.run_until(lambda: alpha.is_allowed("beta") and beta.is_allowed("alpha"), 5)
    keys = set()

    def record():
        s = alpha.remote("beta").session
        keys.update((s.tx_key, s.rx_key))
        t = beta.remote("alpha").session
        assert (t.tx_key, t.rx_key) == (s.rx_key, s.tx_key)

    record()
    for round_ in range(3):
        beta.close()
        beta = world.estate("beta", keep=keep_b)
        out = alpha.send({"r": round_}, "beta")
        assert world.run_until(lambda: out.delivered, 30)
        record()
        alpha.close()
        alpha = world.estate("alpha", keep=keep_a)
        alpha.remote("beta").address = "beta"
        out = alpha.send({"r": -round_}, "beta")
        assert world.run_until(lambda: out.delivered, 30)
        record()
    assert len(keys) == 2 * 7  # every session: two new keys, never seen before


# == 3. names, roles, keep =============================================================


LOOKALIKES = ["alpha\n", "alpha\x00", "ａlpha", "аlpha", "alph\u0430", "١٢٣", "a\u200bb", "a\u202eb", "a/b", "a\\b", "..a", "a..b", "x" * 65]


def test_lookalike_and_control_names_are_refused_and_written_nowhere(tmp_path):
    world = World(seed=107, delay=0.001)
    main = world.estate("main", keep=Keep(tmp_path / "keep"), policy="always")
    mallory = world.net.port("mallory")
    for hostile in LOOKALIKES:
        for name, role in ((hostile, "ok"), ("ok", hostile)):
            nonce = os.urandom(16)
            mallory.send(hs.build_join(LongTermKeys.generate(), name, role, 0, nonce, 9), "main")
            world.run_for(0.05)
            reply = hs.parse_join_reply(mallory.receive()[0])
            assert reply is not None and reply.kind == PacketKind.JOIN_REFUSE, (name, role)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == ["keep", "keep/local.json", "keep/remotes"]


def test_keep_files_are_private_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        world = World(seed=108, delay=0.001)
        keep = Keep(tmp_path / "keep")
        main = world.estate("main", keep=keep)
        other = world.estate("other")
        other.join("main")
        assert world.run_until(lambda: main.is_allowed("other"), 5)
    finally:
        os.umask(old)
    for path in [tmp_path / "keep", *(tmp_path / "keep").rglob("*")]:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
    assert len(list((tmp_path / "keep" / "remotes").glob("*.json"))) == 1


# == 4. malformed input from a joined, hostile estate ===================================


def test_hostile_peer_chunks_with_fields_out_of_range_never_raise_nor_stop_other_traffic():
    world = World(seed=109, delay=0.001)
    alpha, beta = world.pair()
    honest = world.estate("honest")
    honest.join("beta")
    assert world.run_until(lambda: beta.is_allowed("honest"), 5)
    bodies = [
        SEG.pack(ChunkKind.SEG, 0, 0, 0, 5, 5, 0),  # number == count
        SEG.pack(ChunkKind.SEG, 0, 0, 0, 0xFFFFFFFF, 1, 0),  # count < 2
        SEG.pack(ChunkKind.SEG, 0, 0, 0, 0, 0xFFFFFFFF, 10) + b"x" * 10,  # huge count, never completed
        SEG.pack(ChunkKind.SEG, 0, 0, 0, 1, 3, 10) + b"y" * 10,  # count changed within a message
        SEG.pack(ChunkKind.SEG, 0, 0, 0, 0, 2, 1000),  # length overruns
        MSG.pack(ChunkKind.MSG, 0, 9, 2**64 - 1, 0),  # sequence far ahead
        MSG.pack(ChunkKind.MSG, 0, 9, 0, 2**32 - 1),  # length overruns
        MSG.pack(ChunkKind.MSG, 0, 3, 0, 4) + b"\xc1\xc1\xc1\xc1",  # undecodable msgpack
        MSG.pack(ChunkKind.MSG, 0x02, 3, 1, 3) + b"{{{",  # undecodable JSON
        ACK.pack(ChunkKind.ACK, 0, 65, 0, 0),  # too many ranges
        ACK.pack(ChunkKind.ACK, 0, 1, 1, 0) + ACK_RANGE.pack(0, 2**64 - 1) + ACK_STREAM.pack(0, 2**64 - 1),  # acks all
        ACK.pack(ChunkKind.ACK, 0, 1, 0, 0) + ACK_RANGE.pack(5, 1),  # reversed
        SKIP.pack(ChunkKind.SKIP, 0, 0, 2**64 - 1),
        bytes([ChunkKind.ALLOW_ACK, 0, 0, 0, 0, 1]) * 2,
        b"\x05",
        b"\xff",
        b"",
        MSG.pack(ChunkKind.MSG, 0, 0, 0, 0)[:-1],
    ]
    for body in bodies:
        inject_sealed(alpha, "beta", body)
    outs = []
    for i in range(20):
        outs.append(honest.send({"i": i}, "beta"))
        inject_sealed(alpha, "beta", SEG.pack(ChunkKind.SEG, 0, 1, i, 0, 2**31, 1) + b"z")
    assert world.run_until(lambda: all(o.delivered for o in outs), 10)
    assert beta.counts["internal_errors"] == 0
    got = [m.data for m in beta.receive_many() if m.remote == "honest"]
    assert got == [{"i": i} for i in range(20)]
    # alpha's own session survived its nonsense
    b = beta.send({"x": 1}, "alpha")
    assert world.run_until(lambda: b.delivered, 10)


def test_announced_64_mib_message_never_completed_stays_within_the_receiver_bound():
    world = World(seed=110, delay=0.001)
    alpha, beta = world.pair()
    link = beta.remote("alpha").session.link
    bound = link.receive_window + 2 * link.max_message
    piece = b"m" * 60_000
    count = (64 << 20) // len(piece) + 1
    for seq in range(4):  # four 64 MiB messages announced, 2.4 MB sent of each, never finished
        for number in range(40):
            inject_sealed(alpha, "beta", SEG.pack(ChunkKind.SEG, 0, 5, seq, number, count, len(piece)) + piece)
        world.run_for(0.01)
    world.run_for(1.0)
    assert link.buffered <= bound
    out = alpha.send({"other": "stream"}, "beta", stream=6)
    assert world.run_until(lambda: out.delivered, 5)
    assert beta.counts["internal_errors"] == 0


def test_hostile_payload_bombs_are_counted_undecodable_and_never_raise():
    world = World(seed=115, delay=0.001)
    alpha, beta = world.pair()
    bombs = [
        (0, b"\x91" * 1_000_000),  # msgpack arrays nested a million deep
        (0, b"\xdd\xff\xff\xff\xff"),  # msgpack array announcing 4 G items
        (0, b"\xc7\x01\xff\x00"),  # bad timestamp extension
        (0x02, b"[" * 1_000_000),  # JSON nested a million deep
        (0x02, b"1" * 100_000),  # a 100,000-digit integer
    ]
    outs = [alpha.send_bytes(payload, "beta", stream=7, _flags=flags) for flags, payload in bombs]
    assert world.run_until(lambda: all(o.delivered for o in outs), 10)
    got = []
    while (m := beta.receive()) is not None:
        got.append(m)
    assert got == [] and beta.counts["undecodable"] == len(bombs)
    out = alpha.send({"fine": 1}, "beta", stream=7)
    assert world.run_until(lambda: out.delivered, 5)
    assert beta.receive().data == {"fine": 1}


# == 5. acceptance ===========================================================================


def test_rejected_key_stays_rejected_and_never_gets_a_session_under_any_policy():
    for policy in ("never", "once", "always"):
        world = World(seed=111, delay=0.001)
        main = world.estate("main", policy=policy)
        bad = world.estate("bad")
        main.keep.add(RemoteRecord("bad", "bad", 0, bad.keys.verkey, bad.keys.pubkey, Status.REJECTED))
        attempt = bad.join("main")
        assert world.run_until(lambda: attempt.result is not None, 5)
        assert attempt.result == "refused"
        bad.add_remote(RemoteRecord("main", "main", 0, main.keys.verkey, main.keys.pubkey, Status.ACCEPTED), "main")
        out = bad.send({"x": 1}, "main", timeout=2.0)
        world.run_until(lambda: out.done, 10)
        assert out.state == "failed" and main.receive() is None and main.counts["not_accepted"] >= 1


def test_never_policy_pending_joiner_cannot_get_messages_delivered():
    world = World(seed=112, delay=0.001)
    main = world.estate("main", policy="never")
    joiner = world.estate("joiner")
    attempt = joiner.join("main")
    world.run_for(3.0)
    assert attempt.result == "pending"
    joiner.add_remote(RemoteRecord("main", "main", 0, main.keys.verkey, main.keys.pubkey, Status.ACCEPTED), "main")
    out = joiner.send({"x": 1}, "main", timeout=2.0)
    world.run_until(lambda: out.done, 10)
    assert out.state == "failed" and main.receive() is None


# == 6. amplification and state ========================================================


def test_hello_never_amplifies_and_allocates_no_state():
    world = World(seed=113, delay=0.001)
    tap = Tap(world)
    alpha, beta = world.pair()
    sizes = (len(beta._sessions), len(beta._allows.pending), len(beta._joins.attempts), len(beta._allows.jar._seen), len(beta.remotes), len(beta._long_shared))
    mallory = world.net.port("mallory")
    start = len(tap.seen)
    for i in range(200):
        mallory.send(hs.build_hello(hs.ShortTerm(), beta.keys.pubkey, i + 1), "beta")
    world.run_for(1.0)
    into = sum(len(d) for s, dd, d in tap.seen[start:] if s == "mallory" and dd == "beta")
    back = sum(len(d) for s, dd, d in tap.seen[start:] if s == "beta" and dd == "mallory")
    assert 0 < back <= into
    assert (len(beta._sessions), len(beta._allows.pending), len(beta._joins.attempts), len(beta._allows.jar._seen), len(beta.remotes), len(beta._long_shared)) == sizes


def test_real_loopback_socket_replaying_and_flipping_captured_datagrams_changes_nothing():
    """Over real UDP: a third socket replays, bit-flips and truncates every datagram alpha sent."""
    stacks = udp_roads("alpha", "beta")
    alpha, beta = stacks
    captured: list[bytes] = []
    original = alpha.port.send

    def capturing(data, address):
        captured.append(bytes(data))
        return original(data, address)

    alpha.port.send = capturing
    attacker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        alpha.join(beta.address)
        assert serve(stacks, until=lambda: alpha.is_allowed("beta") and beta.is_allowed("alpha"), timeout=5)
        outs = [alpha.send({"n": i}, "beta") for i in range(50)]
        got = []
        assert serve(stacks, until=lambda: got.extend(beta.receive_many()) or all(o.delivered for o in outs), timeout=5)
        before = session_state(beta, "alpha")
        rng = random.Random(5)
        for data in captured:
            attacker.sendto(data, beta.address)
            flipped = bytearray(data)
            flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
            attacker.sendto(bytes(flipped), beta.address)
            attacker.sendto(data[: rng.randrange(len(data))], beta.address)
        more = [alpha.send({"m": i}, "beta") for i in range(10)]
        assert serve(stacks, until=lambda: got.extend(beta.receive_many()) or all(o.delivered for o in more), timeout=5)
        for _ in range(1000):  # loopback sendto queues at the receiver at once: read until empty
            if not select.select([beta.port.fileno()], [], [], 0)[0]:
                break
            beta.service()
        got.extend(beta.receive_many())
        assert [m.data for m in got] == [{"n": i} for i in range(50)] + [{"m": i} for i in range(10)]
        assert session_state(beta, "alpha")[:5] == before[:5]  # the address may follow alpha, never the attacker
        assert beta.remote("alpha").address == alpha.address
        assert beta.counts["internal_errors"] == 0 and beta.counts["replayed"] > 0
    finally:
        attacker.close()
        for stack in stacks:
            stack.close()


# == attacks that worked once: fixed, kept as regression tests ==


def test_join_presenting_another_estates_x25519_key_cannot_capture_its_sessions():
    """Was a finding (fixed in 704c89c): a join may present another estate's X25519 key (possession is never proven); the responder's _by_pubkey then files that estate's next allow under the hostile name."""
    world = World(seed=201, delay=0.001)
    alpha, beta = world.pair(policy="once")
    mallory_keys = LongTermKeys.generate()
    port = world.net.port("mallory")
    # signed with mallory's own Ed25519 key, but carrying alpha's public X25519 key
    port.send(hs.build_join(ForeignKeys(mallory_keys, alpha.keys.pubkey), "mallory", "mallory", 0, os.urandom(16), 5), "beta")
    world.run_for(0.1)
    reply = hs.parse_join_reply(port.receive()[0])
    assert reply is not None
    alpha.allow("beta")  # a routine re-allow (or alpha restarting)
    world.run_for(2.0)
    out = alpha.send({"from": "alpha"}, "beta")
    assert world.run_until(lambda: out.delivered, 10)
    got = [m for m in beta.receive_many() if m.data == {"from": "alpha"}]
    assert [m.remote for m in got] == ["alpha"]


def test_accepted_estate_cannot_take_over_another_estates_name():
    """Was a finding (fixed in 704c89c): Keep.admit lets an accepted key rename itself to another estate's name (pinning bypass); RoadStack._by_name then routes that name to the impostor."""
    world = World(seed=202, delay=0.001)
    main = world.estate("main", policy="once")
    alpha = world.estate("alpha")
    mallory = world.estate("mallory")
    alpha.join("main")
    mallory.join("main")
    assert world.run_until(lambda: main.is_allowed("alpha") and main.is_allowed("mallory"), 10)
    mallory.local.name = "alpha"  # same keys, now calling itself alpha
    mallory.local.role = "alpha"
    attempt = mallory.join("main")
    world.run_until(lambda: attempt.result is not None, 5)
    assert main.remote("alpha").fingerprint == alpha.keys.fingerprint
    out = main.send({"secret": 1}, "alpha")
    world.run_until(lambda: out.done, 10)
    assert [m.data for m in alpha.receive_many()] == [{"secret": 1}]
    assert mallory.receive() is None


def test_forged_join_refuse_from_an_observer_does_not_abort_a_join():
    """Was a finding (fixed in 704c89c): RoadStack._on_join_reply accepts a JOIN_REFUSE from any address signed by any key; an observer of the JOIN aborts it."""
    world = World(seed=203)
    world.net.link("alpha", "beta", delay=0.02)
    tap = Tap(world)
    alpha = world.estate("alpha")
    beta = world.estate("beta")
    mallory_keys = LongTermKeys.generate()
    mallory = world.net.port("mallory")

    def answer_first(data, source, destination):
        if source == "alpha" and data[1] == PacketKind.JOIN:
            request = hs.parse_join(data)
            tag = int.from_bytes(data[4:8], "big")
            mallory.send(hs.build_join_reply(PacketKind.JOIN_REFUSE, mallory_keys, "beta", "beta", 0, request.nonce, "go away", 0, tag), "alpha")

    tap.hooks.append(answer_first)
    attempt = alpha.join("beta")
    world.run_until(lambda: attempt.result is not None and attempt.result != "pending", 5)
    assert attempt.result == "accepted"
    assert world.run_until(lambda: alpha.is_allowed("beta"), 5)


def test_forged_join_accept_from_an_observer_is_not_pinned_as_the_joined_estate():
    """Was a finding (fixed in 704c89c): RoadStack._on_join_reply accepts a JOIN_ACCEPT from any address; an observer that answers first is pinned as the estate joined."""
    world = World(seed=204)
    world.net.link("alpha", "beta", delay=0.02)
    tap = Tap(world)
    alpha = world.estate("alpha", policy="once")
    beta = world.estate("beta")
    mallory_keys = LongTermKeys.generate()
    mallory = world.net.port("mallory")

    def answer_first(data, source, destination):
        if source == "alpha" and data[1] == PacketKind.JOIN:
            request = hs.parse_join(data)
            tag = int.from_bytes(data[4:8], "big")
            mallory.send(hs.build_join_reply(PacketKind.JOIN_ACCEPT, mallory_keys, "beta", "beta", 0, request.nonce, "", 2, tag), "alpha")

    tap.hooks.append(answer_first)
    attempt = alpha.join("beta")
    world.run_until(lambda: attempt.result not in (None, "pending"), 5)
    world.run_for(1.0)
    assert alpha.remote("beta").record.pubkey == beta.keys.pubkey


def test_unauthenticated_joins_from_one_sender_allocate_bounded_state():
    """Was a finding (fixed in 704c89c): unsolicited JOINs with fresh keys are auto-accepted without any cap under once/always (Keep.admit): one sender grows the keep and RoadStack.remotes without bound."""
    world = World(seed=205, delay=0.0)
    # about state, not rate: every JOIN let through without a cookie (cookie replies are rationed per address)
    main = world.estate("main", policy="once", join_rate=1e6, join_work_rate=1e6, join_source_rate=1e6)
    mallory = world.net.port("mallory")
    total = MAX_PENDING + 100
    answered = 0
    for i in range(total):
        mallory.send(hs.build_join(LongTermKeys.generate(), f"m{i}", "m", 0, os.urandom(16), i + 1), "main")
        if i % 50 == 49:
            world.run_for(0.5)  # slow enough for any handshake rate limit: this is about state, not rate
            answered += len(mallory.receive_many(4096))
    world.run_for(0.5)
    answered += len(mallory.receive_many(4096))
    assert answered == total  # every join was read and answered ...
    assert len(main.keep.remotes()) <= MAX_PENDING  # ... yet what one sender makes the keep hold is bounded
    assert len(main.remotes) <= MAX_PENDING


def test_join_replies_never_amplify():
    """Was a finding (fixed in 704c89c): a JOIN_REFUSE echoes the hostile name (repr) in its reason, so an unauthenticated, spoofable JOIN draws a reply about 2x its size."""
    world = World(seed=206, delay=0.001)
    tap = Tap(world)
    main = world.estate("main-estate-with-a-long-name", policy="once")
    mallory = world.net.port("mallory")
    for name in ("\x01" * 64, "a", "a b"):
        mallory.send(hs.build_join(LongTermKeys.generate(), name, "r", 0, os.urandom(16), 1), main.address)
    world.run_for(0.5)
    sent = [len(d) for s, _, d in tap.seen if s == "mallory"]
    back = [len(d) for s, _, d in tap.seen if s == main.address]
    assert len(back) == len(sent)
    for request, reply in zip(sent, back):
        assert reply <= request, (request, reply)


def test_hostile_peer_cannot_make_the_receiver_hold_unaccounted_memory():
    """Was a finding (fixed in 704c89c): zero-length SEG/MSG/SKIP chunks are held without counting toward Link.buffered: a joined peer makes the receiver hold unbounded entries (MAX_AHEAD per stream x 65536 streams)."""
    world = World(seed=207, delay=0.0)
    alpha, beta = world.pair()
    link = beta.remote("alpha").session.link
    per = (alpha.datagram_size - 64) // SEG.size
    seq = 1  # seq 0 never arrives: everything after it is held
    wire = 0
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(15):
            body = b"".join(SEG.pack(ChunkKind.SEG, 0, 0, s, 0, 2, 0) for s in range(seq, seq + per))
            seq += per
            wire += len(body)
            inject_sealed(alpha, "beta", body)
            world.run_for(0.001)
        grown = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    held = sum(len(f.pending) for f in link.streams_in.values())
    # what the receiver holds for a peer must be (within 2x) what its window accounting says it holds
    assert grown <= 2 * link.buffered + (1 << 20), (held, grown, link.buffered, wire)


def test_tiny_held_segments_do_not_pin_whole_datagrams():
    """Was a finding (fixed in 704c89c): Link.handle keeps each SEG piece as a memoryview of the whole decrypted body, so a held 1-byte segment pins its whole datagram (~64 KiB) while the hold accounting counts 1 byte."""
    world = World(seed=211, delay=0.0)
    alpha, beta = world.pair()
    link = beta.remote("alpha").session.link
    inject_sealed(alpha, "beta", MSG.pack(ChunkKind.MSG, 0, 1, 0, 1) + b"a")  # stream 1 delivers seq 0
    world.run_for(0.01)
    beta.receive_many()
    filler = b"f" * (alpha.datagram_size - 200)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for seq in range(1, 61):  # seq 0 of stream 0 never comes: each 1-byte segment is held
            body = SEG.pack(ChunkKind.SEG, 0, 0, seq, 1, 2, 1) + b"s" + MSG.pack(ChunkKind.MSG, 0, 1, 0, len(filler)) + filler  # + a duplicate
            inject_sealed(alpha, "beta", body)
            world.run_for(0.001)
        grown = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert link.counts["duplicates"] >= 60
    assert grown <= 2 * link.buffered + (1 << 20), (grown, link.buffered)


def test_garbage_hello_flood_does_not_stop_a_legitimate_allow():
    """Was a finding (fixed in the transport after review): RoadStack._afford: per-source buckets (a tenth of the rate each, 4,096 sources remembered) all feed one global bucket, so garbage HELLOs (no crypto needed) from a few hundred loopback sockets starve every legitimate allow and join."""
    world = World(seed=208, delay=0.001)
    alpha = world.estate("alpha", handshake_rate=20.0)
    beta = world.estate("beta", handshake_rate=20.0)
    alpha.add_remote(RemoteRecord("beta", "beta", 0, beta.keys.verkey, beta.keys.pubkey, Status.ACCEPTED), "beta")
    beta.add_remote(RemoteRecord("alpha", "alpha", 0, alpha.keys.verkey, alpha.keys.pubkey, Status.ACCEPTED), "alpha")
    sources = [world.net.port(f"mallory{i}") for i in range(400)]  # 400 sockets on loopback: no spoofing needed
    for port in sources:
        world.net.link(port.address, "beta", delay=(0.0, 0.05))  # the flood arrives spread out, as a real one does
    junk = pack_header(PacketKind.HELLO, 0, 1, 1) + bytes(hs.HELLO_SIZE - HEADER_SIZE)

    rng = random.Random(8)

    def flood(seconds: float, until=lambda: False) -> None:
        for _ in range(int(seconds / 0.01)):  # 16 garbage HELLOs every 10 ms from random sources (1,600/s)
            if until():
                return
            for port in rng.sample(sources, 16):
                port.send(junk, "beta")
            world.run_for(0.01)

    flood(2.0)  # the flood is already on when alpha wants a session
    out = alpha.send({"hi": 1}, "beta", timeout=8.0)
    flood(9.0, until=lambda: out.done)
    assert out.delivered


def test_raced_copy_of_an_initiate_does_not_redirect_the_session():
    """Was a finding (fixed in 704c89c): RoadStack._on_initiate takes the source address of the first copy of an INITIATE: an observer racing a copy from its own address redirects the ALLOW_ACK and the allow never completes."""
    world = World(seed=209)
    world.net.link("alpha", "beta", delay=0.02)
    tap = Tap(world)
    alpha = world.estate("alpha")
    beta = world.estate("beta")
    mallory = world.net.port("mallory")

    def race(data, source, destination):
        if source == "alpha" and destination == "beta" and data[1] == PacketKind.INITIATE:
            mallory.send(data, "beta")

    tap.hooks.append(race)
    alpha.join("beta")
    world.run_until(lambda: alpha.is_allowed("beta"), 4)
    assert alpha.is_allowed("beta")
    assert beta.remote("alpha").address == "alpha"


def test_replayed_old_join_does_not_redirect_a_remote_without_a_session():
    """Was a finding (fixed in 704c89c): RoadStack._on_join sets the address of a known remote with no session from any verifying JOIN, and JOINs replay forever: one old captured JOIN redirects every later allow towards the attacker."""
    world = World(seed=210, delay=0.001)
    tap = Tap(world)
    keep_b = Keep(None)
    alpha = world.estate("alpha")
    beta = world.estate("beta", keep=keep_b)
    alpha.join("beta")
    assert world.run_until(lambda: alpha.is_allowed("beta") and beta.is_allowed("alpha"), 5)
    captured = tap.kind(PacketKind.JOIN, "alpha", "beta")[0]
    world.run_for(3600.0)
    beta.close()  # beta restarts with its keep: it knows alpha's keys but not where alpha is
    beta = world.estate("beta", keep=keep_b)
    assert beta.remote("alpha").address is None
    mallory = world.net.port("mallory")
    mallory.send(captured, "beta")  # an hour-old JOIN, replayed from elsewhere
    world.run_for(0.5)
    assert beta.remote("alpha").address != "mallory"
    out = beta.send({"to": "alpha"}, "alpha", timeout=3.0)
    world.run_until(lambda: out.done, 5)
    assert not [d for s, dd, d in tap.seen if s == "beta" and dd == "mallory" and d[1] == PacketKind.HELLO]


def test_squatting_another_estates_public_key_first_neither_locks_it_out_nor_captures_its_sessions():
    """Was a finding (fixed in the transport after review): JOIN still does not prove possession of the X25519 key; refusing a second claim (Keep.admit 'already belong to another estate') makes the first claimant win: a squatter who presents alpha's public key first locks alpha out and RoadStack._by_pubkey files alpha's INITIATEs under the squatter."""
    world = World(seed=212, delay=0.001)
    gamma = world.estate("gamma", policy="once")
    alpha = world.estate("alpha")
    # alpha's public keys are public (every JOIN carries them); mallory gets to gamma first
    port = world.net.port("mallory")
    port.send(hs.build_join(ForeignKeys(LongTermKeys.generate(), alpha.keys.pubkey), "mallory", "mallory", 0, os.urandom(16), 5), "gamma")
    world.run_for(0.1)
    attempt = alpha.join("gamma")
    world.run_until(lambda: attempt.result not in (None, "pending"), 5)
    if attempt.result != "accepted":  # locked out: alpha gets there by configuration instead
        alpha.add_remote(RemoteRecord("gamma", "gamma", 0, gamma.keys.verkey, gamma.keys.pubkey, Status.ACCEPTED), "gamma")
    out = alpha.send({"from": "alpha"}, "gamma", timeout=5.0)
    world.run_until(lambda: out.done, 10)
    got = [m.remote for m in gamma.receive_many() if m.data == {"from": "alpha"}]
    assert attempt.result == "accepted" and got == ["alpha"], (attempt.result, attempt.reason, got)


def test_a_join_flood_does_not_lock_out_new_estates():
    """Was a finding (fixed in the transport after review): Keep.max_remotes turns an unauthenticated JOIN flood into a lasting lockout: once strangers filled the keep, every genuine new estate is refused until an operator forgets records."""
    # Since issue 10.2 accepted records are never evicted (that freed their
    # names): under once/always a full keep refuses new keys (test_join_budget).
    # Under never the flood's pending records churn among themselves.
    world = World(seed=213, delay=0.0)
    main = world.estate("main", policy="never", join_work_rate=1e6, join_source_rate=1e6)
    mallory = world.net.port("mallory")
    for i in range(MAX_PENDING + 10):
        mallory.send(hs.build_join(LongTermKeys.generate(), f"m{i}", "m", 0, os.urandom(16), i + 1), "main")
        if i % 50 == 49:
            world.run_for(0.5)
    world.run_for(0.5)
    assert main.keep.find("m1009") is not None  # the keep was full of the flood
    newcomer = world.estate("newcomer")
    attempt = newcomer.join("main")
    world.run_until(lambda: attempt.result is not None, 5)
    assert attempt.result == "pending", attempt.reason
    main.keep.set_status(newcomer.keys.fingerprint, Status.ACCEPTED)  # the operator accepts it
    again = newcomer.join("main")
    world.run_until(lambda: again.result not in (None, "pending"), 5)
    assert again.result == "accepted", again.reason


def test_replayed_old_join_does_not_roll_back_a_role_change():
    """Was a finding (fixed in the transport after review): JOINs carry no freshness and Keep.admit lets a known key's JOIN overwrite name/role/mode: replaying an old JOIN rolls an estate's role (and name) back."""
    world = World(seed=214, delay=0.001)
    tap = Tap(world)
    main = world.estate("main", policy="once")
    alpha = world.estate("alpha")
    first = alpha.join("main")
    assert world.run_until(lambda: first.result == "accepted", 5)
    old = tap.kind(PacketKind.JOIN, "alpha", "main")[0]
    alpha.local.role = "manager"  # alpha legitimately changes its role and re-joins
    again = alpha.join("main")
    assert world.run_until(lambda: again.result == "accepted", 5)
    assert main.remote("alpha").record.role == "manager"
    world.net.port("mallory").send(old, "main")
    world.run_for(0.5)
    assert main.remote("alpha").record.role == "manager"


def test_join_reply_reason_cannot_inject_control_characters_into_events():
    """Was a finding (fixed in the transport after review): RoadStack._on_join_reply writes the joined estate's free-text reason (JOIN_REFUSE/JOIN_PEND) into events and JoinAttempt.reason unfiltered: control characters and newlines forge event/log lines."""
    world = World(seed=215, delay=0.001)
    tap = Tap(world)
    alpha = world.estate("alpha")
    hostile = world.net.port("hostile")  # the estate alpha chose to join is hostile
    keys = LongTermKeys.generate()

    def refuse(data, source, destination):
        if source == "alpha" and destination == "hostile" and data[1] == PacketKind.JOIN:
            request = hs.parse_join(data)
            reason = "no\x1b[2J\nallowed beta session 00000001\r"
            hostile.send(hs.build_join_reply(PacketKind.JOIN_REFUSE, keys, "hostile", "hostile", 0, request.nonce, reason, 0, int.from_bytes(data[4:8], "big")), "alpha")

    tap.hooks.append(refuse)
    attempt = alpha.join("hostile")
    world.run_until(lambda: attempt.result is not None, 5)
    assert attempt.result == "refused"
    texts = alpha.events + [attempt.reason]
    assert not [t for t in texts if any(ord(c) < 32 or ord(c) == 127 for c in t)], texts


def test_raced_copies_of_alpha_datagrams_do_not_redirect_its_session():
    """Was a finding (fixed in the transport after review): RoadStack._authentic (and _on_initiate for the first copy) take the source of the first authentic copy with no path validation: an observer racing copies of alpha's SEALED/INITIATE datagrams from its own address gets all of beta's traffic for alpha, so nothing beta sends is delivered."""
    world = World(seed=216)
    world.net.link("alpha", "beta", delay=0.01)
    tap = Tap(world)
    alpha, beta = world.pair()
    mallory = world.net.port("mallory")  # sees alpha's datagrams, answers faster, reads and drops what it gets

    def race(data, source, destination):
        if source == "alpha" and destination == "beta" and data[1] in (PacketKind.SEALED, PacketKind.INITIATE):
            mallory.send(data, "beta")

    tap.hooks.append(race)
    ping = alpha.send({"hello": "beta"}, "beta", timeout=20.0)
    world.run_until(lambda: ping.done, 5)
    outs = [beta.send({"n": i}, "alpha", timeout=20.0) for i in range(5)]
    world.run_until(lambda: ping.done and all(o.done for o in outs), 25)
    stolen = len(mallory.receive_many(4096))
    assert [o.state for o in [ping, *outs]] == ["delivered"] * 6, (stolen, beta.remote("alpha").address)
    assert beta.remote("alpha").address == "alpha"


def test_fake_cookies_cost_the_initiator_no_unbounded_public_key_work(monkeypatch):
    """Was a finding (fixed in the transport after review): RoadStack._on_cookie is not rate limited and handshake.open_cookie redoes crypto_box_beforenm (X25519) for every COOKIE carrying an outstanding tag (visible in the HELLO): an observer makes the initiator do unbounded public-key work."""
    import nacl.bindings

    world = World(seed=217)
    world.net.link("alpha", "beta", delay=0.05)
    tap = Tap(world)
    alpha = world.estate("alpha")
    beta = world.estate("beta")
    alpha.add_remote(RemoteRecord("beta", "beta", 0, beta.keys.verkey, beta.keys.pubkey, Status.ACCEPTED), "beta")
    beta.add_remote(RemoteRecord("alpha", "alpha", 0, alpha.keys.verkey, alpha.keys.pubkey, Status.ACCEPTED), "alpha")
    mallory = world.net.port("mallory")
    rng = random.Random(9)
    calls = []
    real = nacl.bindings.crypto_box_beforenm
    monkeypatch.setattr(nacl.bindings, "crypto_box_beforenm", lambda *a: calls.append(1) or real(*a))

    def fake_cookies(data, source, destination):
        if source == "alpha" and data[1] == PacketKind.HELLO and not calls[1000:]:
            tag = int.from_bytes(data[4:8], "big")
            for _ in range(500):
                mallory.send(pack_header(PacketKind.COOKIE, 0, tag, rng.getrandbits(64)) + rng.randbytes(16 + 32 + hs.COOKIE_SIZE), "alpha")

    tap.hooks.append(fake_cookies)
    alpha.allow("beta")
    world.run_for(0.04)  # the fake cookies arrive; the real one is still on its way
    assert alpha.counts["bad_cookie"] >= 500
    assert len(calls) <= 50, len(calls)


def test_a_name_given_up_by_a_rename_does_not_keep_routing_to_the_old_holder():
    """Was a finding (fixed in the transport after review): after an accepted estate renames itself, RoadStack._by_name keeps its old name pointing at it and RemoteTable.add will not hand the name to its new holder: messages for the estate that now bears the name go to the renamed one."""
    world = World(seed=218, delay=0.001)
    main = world.estate("main", policy="once")
    mallory = world.estate("mallory")
    mallory.join("main")
    assert world.run_until(lambda: main.is_allowed("mallory"), 5)
    mallory.local.name = "zed"  # renames itself: refused since the binding rules (an operator renames)
    refused = mallory.join("main")
    assert world.run_until(lambda: refused.result == "refused", 5) and main.counts["rename_refused"] == 1
    main.keep.rename("mallory", "zed")  # the operator allows it
    again = mallory.join("main")
    assert world.run_until(lambda: again.result == "accepted", 5)
    newcomer = world.estate("mallory", "mallory-2")  # an honest estate now takes the free name
    attempt = newcomer.join("main")
    assert world.run_until(lambda: attempt.result == "accepted" and main.is_allowed(newcomer.keys.fingerprint), 5)
    assert main.remote("mallory").fingerprint == newcomer.keys.fingerprint
