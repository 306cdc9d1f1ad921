"""The six security properties of issue 3, each against a live pair of estates."""

from __future__ import annotations

import os
import random
import stat

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowcast.transport import handshake as hs
from flowcast.transport.crypto import LongTermKeys
from flowcast.transport.keep import Keep, RemoteRecord, Status
from flowcast.transport.wire import HEADER_SIZE, PacketKind, decode_chunks, WireError, pack_header

from .roadkit import World


def _snapshot(stack, name):
    remote = stack.remote(name)
    s = remote.session
    return (s.local_index, s.remote_index, s.tx_key, s.rx_key, remote.address, s.window.highest)


def _sealed_from(world, src, dst):
    return [data for _, s, d, data in world.net.trace if s == src and d == dst and data[1] == PacketKind.SEALED]


# -- 1. forged or unauthenticated datagrams change nothing ----------------------------


def test_forged_datagrams_never_change_an_established_session():
    world = World(seed=21, delay=0.001, record=True)
    alpha, beta = world.pair()
    out = alpha.send({"n": 1}, "beta")
    assert world.run_until(lambda: out.delivered, 5)
    before = _snapshot(beta, "alpha")
    real = _sealed_from(world, "alpha", "beta")[-1]
    mallory = world.net.port("mallory")
    rng = random.Random(1)
    forged = []
    # same session id and a fresh or reused counter, garbage body
    for counter in (0, 1, 10**6, 2**63):
        forged.append(real[:8] + counter.to_bytes(8, "big") + rng.randbytes(64))
    forged.append(real[:HEADER_SIZE] + rng.randbytes(len(real) - HEADER_SIZE))
    # an unsigned HELLO with a garbage body, and a well-formed HELLO from a stranger
    forged.append(pack_header(PacketKind.HELLO, 0, 7, 7) + rng.randbytes(176))
    forged.append(hs.build_hello(hs.ShortTerm(), beta.keys.pubkey, 99))
    # an INITIATE that claims alpha's long-term key but cannot vouch for it
    short = hs.ShortTerm()
    forged.append(pack_header(PacketKind.INITIATE, 0, 5, 5) + short.public + rng.randbytes(112 + 124))
    # a join claiming alpha's name with another key (beta pins names under "once"? here: always)
    for data in forged:
        mallory.send(data, "beta")
    world.run_for(1.0)
    # nothing the forgeries said was believed; the responder answered the stranger's HELLO statelessly
    after = _snapshot(beta, "alpha")
    assert after[:5] == before[:5]
    assert beta.counts["unauthentic"] + beta.counts["replayed"] >= 5 and beta.counts["bad_hello"] >= 1 and beta.counts["bad_initiate"] >= 1
    assert beta.counts["internal_errors"] == 0
    # and the real session still works both ways
    a2 = alpha.send({"n": 2}, "beta")
    b2 = beta.send({"back": 1}, "alpha")
    assert world.run_until(lambda: a2.delivered and b2.delivered, 5)


def test_initiate_with_stolen_cookie_but_no_long_term_key_is_refused():
    world = World(seed=22, delay=0.001)
    alpha, beta = world.pair()
    before = _snapshot(beta, "alpha")
    mallory_port = world.net.port("mallory")
    short = hs.ShortTerm()
    mallory_port.send(hs.build_hello(short, beta.keys.pubkey, 42), "beta")
    world.run_for(0.1)
    cookie_packet = mallory_port.receive()[0]
    server_short, cookie, _ = hs.open_cookie(cookie_packet, short, beta.keys.pubkey)

    class Impostor:  # presents alpha's public keys without their secrets
        pubkey = alpha.keys.pubkey
        verkey = alpha.keys.verkey

        @staticmethod
        def shared(other):
            return os.urandom(32)

    mallory_port.send(hs.build_initiate(short, Impostor, beta.keys.pubkey, server_short, cookie, 42, 1234), "beta")
    world.run_for(0.5)
    assert beta.counts["bad_vouch"] == 1
    assert _snapshot(beta, "alpha")[:5] == before[:5]


# -- 2. replays are never delivered again ------------------------------------------


def _replay_all(world, datagrams, to):
    mallory = world.net.ports.get("mallory") if hasattr(world.net, "ports") else None
    mallory = world.net.port("mallory") if mallory is None else mallory
    for data in datagrams:
        mallory.send(data, to)
    world.run_for(0.5)
    mallory.close()


def test_replayed_datagrams_are_not_delivered_seconds_or_hours_later():
    world = World(seed=23, delay=0.001, record=True)
    alpha, beta = world.pair()
    outs = [alpha.send({"n": i}, "beta") for i in range(20)]
    assert world.run_until(lambda: all(o.delivered for o in outs), 5)
    assert len(beta.receive_many()) == 20
    captured = _sealed_from(world, "alpha", "beta")
    handshakes = [d for _, s, dd, d in world.net.trace if s == "alpha" and dd == "beta" and d[1] != PacketKind.SEALED]
    _replay_all(world, captured + handshakes, "beta")
    assert beta.receive() is None
    world.run_for(3600.0)  # an hour later: cookies expired, window long past
    _replay_all(world, captured + handshakes, "beta")
    assert beta.receive() is None
    assert beta.counts["replayed"] >= len(captured)


def test_replays_after_either_side_restarts_are_not_delivered():
    world = World(seed=24, delay=0.001, record=True)
    keep_a, keep_b = Keep(None), Keep(None)
    alpha = world.estate("alpha", keep=keep_a)
    beta = world.estate("beta", keep=keep_b)
    alpha.join("beta")
    assert world.run_until(lambda: alpha.is_allowed("beta") and beta.is_allowed("alpha"), 5)
    outs = [alpha.send({"n": i}, "beta") for i in range(10)]
    assert world.run_until(lambda: all(o.delivered for o in outs), 5)
    beta.receive_many()
    captured = [d for _, s, dd, d in world.net.trace if s == "alpha" and dd == "beta"]
    # restart beta (same keys, fresh process state), then alpha re-allows
    beta.close()
    beta = world.estate("beta", keep=keep_b)
    out = alpha.send({"after": "beta restart"}, "beta")
    assert world.run_until(lambda: out.delivered, 20)
    assert [m.data for m in beta.receive_many()] == [{"after": "beta restart"}]
    _replay_all(world, captured, "beta")
    assert beta.receive() is None
    # restart alpha: it allows anew; old datagrams still never deliver
    alpha.close()
    alpha = world.estate("alpha", keep=keep_a)
    alpha.remote("beta").address = "beta"
    out = alpha.send({"after": "alpha restart"}, "beta")
    assert world.run_until(lambda: out.delivered, 20)
    assert [m.data for m in beta.receive_many()] == [{"after": "alpha restart"}]
    _replay_all(world, captured, "beta")
    assert beta.receive() is None


# -- 3. hostile names and roles ----------------------------------------------------------


HOSTILE = ["../../etc/passwd", "a/b", "..", ".", "a b", "tab\tname", "nul\x00x", "ctl\x1b[31m", "x" * 10_000, "", "-rf", "é"]


def test_hostile_names_and_roles_are_refused_with_a_reason_and_nothing_escapes_the_keep(tmp_path):
    world = World(seed=25, delay=0.001)
    keep = Keep(tmp_path / "keep")
    main = world.estate("main", keep=keep)
    mallory = world.net.port("mallory")
    reasons = []
    for hostile in HOSTILE:
        for name, role in ((hostile, "ok"), ("ok", hostile)):
            keys = LongTermKeys.generate()
            nonce = os.urandom(16)
            mallory.send(hs.build_join(keys, name, role, 0, nonce, 1), "main")
            world.run_for(0.05)
            reply = hs.parse_join_reply(mallory.receive()[0])
            assert reply is not None and reply.kind == PacketKind.JOIN_REFUSE and reply.nonce == nonce
            reasons.append(reply.reason)
    assert all(("name" in r or "role" in r) for r in reasons)
    assert main.counts["join_refused"] == 2 * len(HOSTILE)
    files = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert files == ["keep", "keep/local.json", "keep/remotes"]
    assert stat.S_IMODE(os.stat(tmp_path / "keep").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "keep" / "local.json").st_mode) == 0o600


# -- 4. garbage never raises and never stops traffic ----------------------------------------


def test_garbage_truncated_oversized_and_flipped_datagrams_are_counted_and_dropped():
    world = World(seed=26, delay=0.001, record=True)
    alpha, beta = world.pair()
    warm = [alpha.send({"n": i}, "beta") for i in range(5)]
    assert world.run_until(lambda: all(o.delivered for o in warm), 5)
    real = [d for _, s, dd, d in world.net.trace if s == "alpha" and dd == "beta"]
    rng = random.Random(7)
    junk = [b"", b"\xf1", rng.randbytes(15), rng.randbytes(60_000)]
    junk += [rng.randbytes(rng.randrange(1, 2000)) for _ in range(200)]
    for data in real:
        junk.append(data[: rng.randrange(0, len(data))])
        flipped = bytearray(data)
        flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        junk.append(bytes(flipped))
    mallory = world.net.port("mallory")
    outs = []
    for i, data in enumerate(junk):
        mallory.send(data, "beta")
        if i % 10 == 0:
            outs.append(alpha.send({"during": i}, "beta"))
    assert world.run_until(lambda: all(o.delivered for o in outs), 10)
    dropped = sum(beta.counts.values())
    assert dropped >= len(junk) - 10  # a few flips land in a header field that only misroutes
    assert beta.counts["internal_errors"] == 0
    assert [m.data for m in beta.receive_many()][-len(outs):] == [{"during": i} for i in range(0, len(junk), 10)]


# -- 5. only accepted estates get messages delivered -------------------------------------------


def test_an_estate_that_is_not_accepted_cannot_get_a_message_delivered():
    world = World(seed=27, delay=0.001)
    main = world.estate("main", policy="never")
    stranger = world.estate("stranger")
    # the stranger learned main's keys out of band and tries to allow straight away
    stranger.add_remote(RemoteRecord("main", "main", 0, main.keys.verkey, main.keys.pubkey, Status.ACCEPTED), "main")
    out = stranger.send({"let me in": 1}, "main", timeout=3.0)
    world.run_until(lambda: out.done, 10)
    assert out.state == "failed"
    assert main.receive() is None and main.counts["not_accepted"] >= 1


def test_a_pinned_estate_whose_key_changed_is_rejected():
    world = World(seed=28, delay=0.001)
    main = world.estate("main", policy="once")
    first = world.estate("alpha", "alpha-1")
    first.join("main")
    assert world.run_until(lambda: main.is_allowed("alpha"), 5)
    impostor = world.estate("alpha", "alpha-2")  # same name, new keys
    attempt = impostor.join("main")
    assert world.run_until(lambda: attempt.result is not None, 5)
    assert attempt.result == "refused" and "pinned" in attempt.reason
    assert any(e.startswith("key-changed alpha") for e in main.events)
    impostor.add_remote(RemoteRecord("main", "main", 0, main.keys.verkey, main.keys.pubkey, Status.ACCEPTED), "main")
    out = impostor.send({"x": 1}, "main", timeout=2.0)
    world.run_until(lambda: out.done, 10)
    assert out.state == "failed" and main.receive() is None


# -- 6. the decoders never raise (the full 100,000-input run is bench/fuzz_decoder.py) --------


_WORLD = World(seed=29, delay=0.001, record=True)
_ALPHA, _BETA = _WORLD.pair()
_SAMPLES = [d for _, _, _, d in _WORLD.net.trace]


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(st.binary(max_size=600), st.tuples(st.sampled_from(_SAMPLES), st.integers(0, 10_000), st.integers(0, 255)).map(
    lambda t: bytes(t[0][: t[1] % (len(t[0]) + 1)]) + bytes([t[2]]) + t[0][t[1] % (len(t[0]) + 1) + 1 :]
)))
def test_fuzzed_datagrams_never_raise(data):
    for stack in (_ALPHA, _BETA):
        stack._receive(data, "fuzzer", _WORLD.scheduler.clock.now())
    try:
        decode_chunks(data)
    except WireError:
        pass
    assert _ALPHA.counts["internal_errors"] == 0 and _BETA.counts["internal_errors"] == 0
