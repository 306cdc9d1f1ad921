"""Sealing: the direct libsodium path agrees with PyNaCl's and takes any bytes-like input."""

import os

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
