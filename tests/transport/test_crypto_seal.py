"""Sealing: the direct libsodium path agrees with PyNaCl's and takes any bytes-like input."""

import os
import random

import nacl.bindings
import pytest

from flowcast.transport import crypto


@pytest.mark.parametrize("size", [0, 1, 100, 65536])
def test_seal_matches_pynacl_and_opens_from_any_buffer(size):
    key, header, body = os.urandom(32), os.urandom(16), os.urandom(size)
    sealed = crypto.seal(key, header, body)
    assert sealed == header + nacl.bindings.crypto_secretbox_easy(body, header + crypto.NONCE_PAD, key)
    for ciphertext in (sealed[16:], memoryview(sealed)[16:], bytearray(sealed[16:])):
        assert crypto.open_sealed(key, header, ciphertext) == body
    assert crypto.seal(key, header, memoryview(body)) == sealed


def test_any_altered_bit_is_refused():
    key, header, body = os.urandom(32), os.urandom(16), b"x" * 40
    sealed = bytearray(crypto.seal(key, header, body))
    for i in (0, 20, len(sealed) - 1):
        bad = bytearray(sealed)
        bad[i] ^= 1
        with pytest.raises(crypto.CryptoError):
            crypto.open_sealed(key, bytes(bad[:16]), bytes(bad[16:]))


@pytest.mark.parametrize("size", [0, 1, 100, crypto.SCRATCH_SIZE - 16, crypto.SCRATCH_SIZE - 15, 65536])
def test_a_sessions_scratch_buffer_gives_the_same_bytes_and_never_aliases(size):
    key, header, body = os.urandom(32), os.urandom(16), os.urandom(size)
    scratch = crypto.Scratch()
    sealed = crypto.seal(key, header, body, scratch)
    assert sealed == crypto.seal(key, header, body)
    opened = crypto.open_sealed(key, header, sealed[16:], scratch)
    assert opened == body
    # results are copies: the next packet through the same scratch leaves them alone
    crypto.seal(key, header, os.urandom(size), scratch)
    assert opened == body and crypto.open_sealed(key, header, sealed[16:]) == body
    bad = bytearray(sealed[16:])
    bad[-1] ^= 1
    with pytest.raises(crypto.CryptoError):
        crypto.open_sealed(key, header, bytes(bad), scratch)


class _ReferenceWindow:
    """The replay window as a 4,096-bit integer (the former implementation)."""

    def __init__(self, size):
        self.size, self.highest, self.bits = size, -1, 0

    def check(self, counter):
        offset = self.highest - counter
        return offset < 0 or (offset < self.size and not (self.bits >> offset) & 1)

    def accept(self, counter):
        offset = self.highest - counter
        if offset < 0:
            shift = -offset
            self.bits = 1 if shift >= self.size else ((self.bits << shift) | 1) & ((1 << self.size) - 1)
            self.highest = counter
            return True
        if offset >= self.size or self.bits & (1 << offset):
            return False
        self.bits |= 1 << offset
        return True


@pytest.mark.parametrize("size", [1, 2, 7, 64, 4096])
def test_replay_window_ring_agrees_with_the_bitmap_definition(size):
    rng = random.Random(size)
    for _ in range(10):
        ring, reference = crypto.ReplayWindow(size), _ReferenceWindow(size)
        counter = 0
        for _ in range(2000):
            step = rng.random()
            if step < 0.5:
                counter += 1
            elif step < 0.6:
                counter += rng.randint(0, 3 * size)
            probe = max(0, counter - rng.randint(0, 2 * size)) if rng.random() < 0.3 else counter
            assert ring.check(probe) == reference.check(probe)
            assert ring.accept(probe) == reference.accept(probe)


def test_replay_window_is_a_bitmap_of_one_bit_per_counter():
    assert len(crypto.ReplayWindow(4096).seen) == 512
    assert len(crypto.ReplayWindow(7).seen) == 1


def test_replay_window_edges_far_ahead_slide_and_old_counters_refused_forever():
    window = crypto.ReplayWindow(64)
    for counter in range(10):
        assert window.accept(counter)
    # a counter far ahead slides the whole window: everything before it is too old
    far = 10**12
    assert window.check(far) and window.accept(far)
    assert not window.check(far) and not window.accept(far)
    for old in (0, 9, far - 64, far - 1000):
        assert not window.check(old) and not window.accept(old)
    # within the window: each counter once, in any order
    for counter in (far - 63, far - 1, far - 30):
        assert window.accept(counter)
        assert not window.accept(counter)
    assert not window.accept(far - 64)  # just below the window: refused, never seen
    # slide by less than the window, across the ring's end, clearing only the new slots
    assert window.accept(far + 40)
    assert not window.accept(far - 1) and not window.accept(far - 30)  # still remembered (or too old)
    for counter in range(far + 1, far + 40):
        assert window.check(counter)
    assert window.accept(far + 20) and not window.accept(far + 20)
    # once slid past, a counter stays refused whatever comes later
    assert window.accept(far + 40 + 64)
    for counter in (far + 20, far + 40, far + 39):
        assert not window.accept(counter)
