"""The session cipher: AEGIS-256 only when both ends offer it, XSalsa20-Poly1305 otherwise.

The offer is a header flag of COOKIE and INITIATE, authenticated as their
box's nonce: tampering with it fails the handshake packet, it cannot steer
the cipher.  Each cipher gets keys of its own.  The tests make each stack
with its offer and take hardware AES as present, so they mean the same on
a machine without it (libsodium's software AEGIS is correct there, only
never offered).
"""

from __future__ import annotations

import os

import nacl.bindings
import pytest

from flowcast.transport import crypto
from flowcast.transport.handshake import F_AEGIS
from flowcast.transport.wire import HEADER_SIZE, PacketKind

from .roadkit import World


@pytest.fixture(autouse=True)
def _hardware_aes(monkeypatch):
    monkeypatch.setattr("flowcast.transport.road.HARDWARE_AES", True)


def _estates(world: World, alpha_aegis: bool, beta_aegis: bool):
    return world.estate("alpha", aegis=alpha_aegis), world.estate("beta", aegis=beta_aegis)


@pytest.mark.parametrize(
    "alpha_aegis, beta_aegis, expected",
    [(True, True, True), (True, False, False), (False, True, False), (False, False, False)],
)
def test_a_session_seals_with_aegis_only_when_both_ends_offer_it(alpha_aegis, beta_aegis, expected):
    world = World(seed=41, delay=0.001)
    alpha, beta = _estates(world, alpha_aegis, beta_aegis)
    alpha.join("beta")
    assert world.run_until(lambda: alpha.is_allowed("beta") and beta.is_allowed("alpha"), 5)
    ours, theirs = alpha.remote("beta").session, beta.remote("alpha").session
    assert ours.aegis is expected and theirs.aegis is expected
    seen = []
    original = world.net._send

    def tap(data, src, dst):
        if data[1] == PacketKind.SEALED:
            seen.append(data)
        return original(data, src, dst)

    world.net._send = tap
    small = alpha.send_bytes(b"s" * 100, "beta")
    large = beta.send_bytes(os.urandom(200_000), "alpha")
    assert world.run_until(lambda: small.delivered and large.delivered, 10)
    assert beta.receive().data == b"s" * 100 and len(alpha.receive().data) == 200_000
    # every datagram opens under its sender's key with the chosen cipher, and with no other
    for data in seen:
        key = ours.tx_key if data[4:8] == theirs.local_index.to_bytes(4, "big") else theirs.tx_key
        crypto.open_packet(key, data, expected)
        with pytest.raises(crypto.CryptoError):
            crypto.open_packet(key, data, not expected)


@pytest.mark.parametrize("kind", [PacketKind.COOKIE, PacketKind.INITIATE])
def test_a_flipped_offer_fails_its_handshake_packet(kind):
    world = World(seed=42, delay=0.001)
    alpha, beta = _estates(world, True, True)
    original = world.net._send
    flipped = []

    def tamper(data, src, dst):
        if data[1] == kind:
            data = bytearray(data)
            data[3] ^= F_AEGIS  # the flags' low byte
            flipped.append(bytes(data))
            data = bytes(data)
        return original(data, src, dst)

    world.net._send = tamper
    alpha.join("beta")
    world.run_for(2.0)
    assert flipped, "the handshake packet was never sent"
    assert alpha.remote("beta").session is None or not alpha.is_allowed("beta")
    if kind == PacketKind.COOKIE:
        assert alpha.counts["bad_cookie"] >= 1
    else:
        assert beta.remote("alpha") is None or beta.remote("alpha").session is None
    world.net._send = original  # the path heals: the retried handshake makes an AEGIS session
    assert world.run_until(lambda: alpha.is_allowed("beta") and beta.is_allowed("alpha"), 15)
    assert alpha.remote("beta").session.aegis and beta.remote("alpha").session.aegis


def test_each_cipher_gets_keys_of_its_own():
    shared, initiator, responder = os.urandom(32), os.urandom(32), os.urandom(32)
    plain = crypto.derive_session_keys(shared, initiator, responder, False)
    aegis = crypto.derive_session_keys(shared, initiator, responder, True)
    assert len(set(plain + aegis)) == 4


@pytest.mark.parametrize("size", [0, 1, 100, crypto.SCRATCH_SIZE - crypto.AEGIS_TAG, crypto.SCRATCH_SIZE + 1, 65536])
def test_aegis_seal_matches_pynacl_and_refuses_any_altered_bit(size):
    key, header, body = os.urandom(32), os.urandom(16), os.urandom(size)
    scratch = crypto.Scratch()
    sealed = crypto.seal_aegis(key, header, body, scratch)
    reference = nacl.bindings.crypto_aead_aegis256_encrypt(body, None, header + crypto.AEGIS_PAD, key)
    assert sealed == header + reference
    assert crypto.seal_aegis(key, header, memoryview(body)) == sealed
    opened = crypto.open_aegis(key, header, sealed[16:], scratch)
    crypto.seal_aegis(key, header, os.urandom(size), scratch)  # the scratch reused: the result is a copy
    assert opened == body
    for i in {0, 15, 16, len(sealed) - 1}:
        bad = bytearray(sealed)
        bad[i] ^= 1
        with pytest.raises(crypto.CryptoError):
            crypto.open_aegis(key, bytes(bad[:16]), bytes(bad[16:]), scratch)
    with pytest.raises(crypto.CryptoError):
        crypto.open_aegis(key, header, sealed[16 : 16 + crypto.AEGIS_TAG - 1])


def test_a_datagram_holds_a_full_body_under_either_cipher():
    """max_body leaves room for the longer tag: a road's datagrams never pass its datagram size."""
    for alpha_aegis in (True, False):
        world = World(seed=43, delay=0.001)
        alpha, beta = _estates(world, alpha_aegis, True)
        alpha.join("beta")
        assert world.run_until(lambda: alpha.is_allowed("beta") and beta.is_allowed("alpha"), 5)
        sizes = []
        original = world.net._send

        def tap(data, src, dst, sizes=sizes, original=original):
            sizes.append(len(data))
            return original(data, src, dst)

        world.net._send = tap
        out = alpha.send_bytes(os.urandom(100_000), "beta")
        assert world.run_until(lambda: out.delivered, 10)
        limit = alpha.remote("beta").session.link.max_body + HEADER_SIZE + crypto.TAG_ROOM
        assert max(sizes) <= limit
        assert max(sizes) == limit - (0 if alpha_aegis else crypto.AEGIS_TAG - crypto.MAC_SIZE)
