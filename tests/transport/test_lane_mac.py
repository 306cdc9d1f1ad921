"""The lane tag: BLAKE2b below POLY_FROM bytes, Poly1305 from there up, chosen by length.

Both ends pick the algorithm from the datagram's length alone, so these
tests pin the wire format that docs/protocol.md section 9 states (known
answers computed here independently), and check that on either side of
the threshold a datagram altered, cut or re-keyed is refused.
"""

from __future__ import annotations

import hashlib
import os

import pytest
from nacl.bindings import crypto_aead_chacha20poly1305_ietf_encrypt

from flowcast.transport.lanekeys import FORGED, POLY_FROM, REPLAYED, SEQ_SIZE, TAG_SIZE, TRAILER_SIZE, YardMac, check, new_secret, pair_key, seal

HEAD = 9  # a raw lane header's length; seal takes header and chunks apart


def _pair():
    secret = new_secret()
    ab, ba = pair_key(secret, "a", "b"), pair_key(secret, "b", "a")
    return ab, YardMac(ab, ba, 0), YardMac(ba, ab, 0)


def _datagram(mac: YardMac, signed: int, seq: int) -> bytes:
    """A sealed datagram whose authenticated part (chunks and seq) is ``signed`` bytes."""
    body = os.urandom(signed - HEAD - SEQ_SIZE)
    return seal(mac, os.urandom(HEAD), body, seq)


@pytest.mark.parametrize("signed", [HEAD + SEQ_SIZE, 100, POLY_FROM - 1, POLY_FROM, POLY_FROM + 1, 65_000])
def test_the_tag_is_blake2b_below_the_threshold_and_poly1305_from_it(signed):
    key, sender, _ = _pair()
    seq = 0x0102030405060708
    datagram = _datagram(sender, signed, seq)
    assert len(datagram) == signed + TAG_SIZE
    authenticated, tag = datagram[:signed], datagram[signed:]
    assert authenticated[-SEQ_SIZE:] == seq.to_bytes(SEQ_SIZE, "big")
    if signed < POLY_FROM:
        expected = hashlib.blake2b(authenticated, key=key, digest_size=TAG_SIZE).digest()
    else:
        poly_key = hashlib.blake2b(key=key, person=b"flowcast lane cp", digest_size=32).digest()
        expected = crypto_aead_chacha20poly1305_ietf_encrypt(b"", authenticated, bytes(4) + authenticated[-SEQ_SIZE:], poly_key)
    assert tag == expected


@pytest.mark.parametrize("signed", [100, POLY_FROM - 1, POLY_FROM, 65_000])
def test_either_tag_refuses_what_was_altered_cut_rekeyed_or_replayed(signed):
    _, sender, receiver = _pair()
    datagram = _datagram(sender, signed, 10)
    for where in (0, HEAD, signed // 2, signed - 1, signed, len(datagram) - 1):
        flipped = bytearray(datagram)
        flipped[where] ^= 0x01
        assert check(receiver, bytes(flipped)) == FORGED, where
    assert check(receiver, datagram[:-1]) == FORGED
    assert check(receiver, datagram[1:]) == FORGED
    assert check(receiver, datagram[: TRAILER_SIZE - 1]) == FORGED
    # the reverse direction's key, and the receiver's own sealing, do not pass
    assert check(receiver, _datagram(receiver, signed, 11)) == FORGED
    assert check(receiver, datagram) == signed - SEQ_SIZE
    assert check(receiver, datagram) == REPLAYED


def test_a_datagram_of_the_other_algorithms_length_class_is_forged():
    """A BLAKE2b tag on a datagram long enough for Poly1305 is not accepted: the length decides."""
    key, _, receiver = _pair()
    authenticated = os.urandom(POLY_FROM - SEQ_SIZE) + (5).to_bytes(SEQ_SIZE, "big")
    wrong = authenticated + hashlib.blake2b(authenticated, key=key, digest_size=TAG_SIZE).digest()
    assert check(receiver, wrong) == FORGED


def test_check_takes_any_bytes_like_datagram():
    """What a port or a fuzzer hands in (bytearray, memoryview) is checked, not a crash."""
    _, sender, receiver = _pair()
    small, large = _datagram(sender, 200, 20), _datagram(sender, 20_000, 21)
    assert check(receiver, bytearray(small)) == 200 - SEQ_SIZE
    assert check(receiver, memoryview(large)) == 20_000 - SEQ_SIZE
