"""The wire contract of docs/causal.md, "Encoding and hash": one canonical form, a fixed known vector, hostile bytes refused.

The known vector is written out byte by byte from the document, not from
the code, so a change to the encoder that another implementation would not
follow fails here first.
"""

from __future__ import annotations

import hashlib

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nacl.signing import SigningKey

from flowcast.causal.message import (
    MAX_CONTENT,
    MAX_DEPS,
    MAX_TAGS,
    CausalError,
    TopicMsgID,
    check_topic,
    decode,
    make,
    verify_id,
)

SEED = bytes(range(32))
PUBLISHER = bytes.fromhex("03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8")
GENESIS_HASH = bytes.fromhex("1ff42293d84633a2b320d6f5008509ca24c4f31bd9532749d52990ab6f7cb8c6")
GENESIS_HSIG = bytes.fromhex(
    "07b69cf0098214141a2870679e8911470544869b877dfd43864af7af5d6353a2"
    "fe2402d49825fdfefe4ce3a9bf2b0d8010c7080975554ab5c952fc5cec873d05"
)
REPLY_HASH = bytes.fromhex("6222df0f4e9256feb633e29cee20903732c4cb5dbdf1f501ecf1b8d10ac8804c")
REPLY_HSIG = bytes.fromhex(
    "1acb4d3e3aa46d1d4b8ffe8579b196ab9d7d54b0be6341366d9e6dca5c5933da"
    "1cfdee443da3ea1672591e5799be6632fb0140dddceab0f1851d90cec237d408"
)


def _reply_body_by_hand() -> bytes:
    """[1, "chat/room-1", 1, publisher, [[publisher, genesis hash]], ["b.1", "reply"], b"hello"] in shortest msgpack."""
    return b"".join([
        b"\x97",                          # array of 7
        b"\x01",                          # version 1 (positive fixint)
        b"\xab" + b"chat/room-1",         # fixstr of 11
        b"\x01",                          # epoch 1
        b"\xc4\x20" + PUBLISHER,          # bin 8 of 32
        b"\x91\x92",                      # deps: array of 1 pair
        b"\xc4\x20" + PUBLISHER,
        b"\xc4\x20" + GENESIS_HASH,
        b"\x92\xa3b.1\xa5reply",          # tags, sorted by their UTF-8 bytes
        b"\xc4\x05hello",                 # content: bin 8 of 5
    ])


def test_known_vector() -> None:
    key = SigningKey(SEED)
    assert bytes(key.verify_key) == PUBLISHER
    genesis = make(key, "chat/room-1", b"", epoch=1, tags=["epoch"])
    assert (genesis.hash, genesis.hsig) == (GENESIS_HASH, GENESIS_HSIG)
    reply = make(key, "chat/room-1", b"hello", epoch=1, deps=[genesis.id], tags=["reply", "b.1"])
    body = _reply_body_by_hand()
    assert reply.body == body
    assert hashlib.blake2b(b"flowcast/causal/v1\x00" + body, digest_size=32).digest() == REPLY_HASH == reply.hash
    assert reply.hsig == REPLY_HSIG  # Ed25519 is deterministic: the same key and hash give these bytes anywhere
    key.verify_key.verify(b"flowcast/causal/id/v1\x00" + REPLY_HASH, REPLY_HSIG)
    wire = b"\x93" + b"\xc4" + bytes([len(body)]) + body + b"\x91\xc4\x40" + GENESIS_HSIG + b"\xc4\x40" + REPLY_HSIG
    assert reply.wire == wire
    back = decode(wire)
    assert (back.topic, back.epoch, back.publisher, back.tags, back.content) == ("chat/room-1", 1, PUBLISHER, ("b.1", "reply"), b"hello")
    assert back.deps == (TopicMsgID(PUBLISHER, GENESIS_HASH, GENESIS_HSIG),) and back.prev == back.deps[0]
    assert back.hash == REPLY_HASH and verify_id(PUBLISHER, back.hash, back.hsig)


def test_make_orders_deps_and_tags_so_the_same_message_has_one_id() -> None:
    key = SigningKey(SEED)
    a, b, c = (make(key, "t", bytes([i])).id for i in range(3))
    one = make(key, "t", b"x", deps=[a, b, c], tags=["z", "a", "m"])
    two = make(key, "t", b"x", deps=[c, a, b, a], tags=["m", "z", "a", "a"])
    assert one.wire == two.wire and one.hash == two.hash
    assert [d.hash for d in one.deps] == sorted(d.hash for d in one.deps)


def _rewire(body_fields: list, dep_sigs: list, hsig: bytes = bytes(64), *, pack=None) -> bytes:
    pack = pack or (lambda v: msgpack.packb(v, use_bin_type=True))
    return pack([pack(body_fields), dep_sigs, hsig])


def _fields(**over) -> list:
    base = {"v": 1, "topic": "t", "epoch": 0, "pub": PUBLISHER, "deps": [], "tags": [], "content": b"x"}
    base.update(over)
    return [base["v"], base["topic"], base["epoch"], base["pub"], base["deps"], base["tags"], base["content"]]


GOOD_BODY = msgpack.packb(_fields(), use_bin_type=True)


def _wrap(body: bytes) -> bytes:
    """A wire form around ``body`` with the outer array itself canonical."""
    return msgpack.packb([body, [], bytes(64)], use_bin_type=True)


HOSTILE = {
    "version 2": _rewire(_fields(v=2), []),
    "version as bool": _rewire(_fields(v=True), []),
    "topic with a space": _rewire(_fields(topic="a b"), []),
    "topic of nine segments": _rewire(_fields(topic="/".join("a" * 9)), []),
    "negative epoch": _rewire(_fields(epoch=-1), []),
    "float epoch": _rewire(_fields(epoch=1.0), []),
    "short publisher": _rewire(_fields(pub=bytes(31)), []),
    "publisher as str": _rewire(_fields(pub="x" * 32), []),
    "unsorted deps": _rewire(_fields(deps=[[PUBLISHER, b"\x02" * 32], [PUBLISHER, b"\x01" * 32]]), [bytes(64)] * 2),
    "a dep twice": _rewire(_fields(deps=[[PUBLISHER, b"\x01" * 32]] * 2), [bytes(64)] * 2),
    "a dep without its hsig": _rewire(_fields(deps=[[PUBLISHER, b"\x01" * 32]]), []),
    "a short dep hash": _rewire(_fields(deps=[[PUBLISHER, b"\x01" * 31]]), [bytes(64)]),
    "unsorted tags": _rewire(_fields(tags=["b", "a"]), []),
    "a tag twice": _rewire(_fields(tags=["a", "a"]), []),
    "a bad tag": _rewire(_fields(tags=["a/b"]), []),
    "content as str": _rewire(_fields(content="x"), []),
    "body of 8": _rewire(_fields() + [0], []),
    "a map": msgpack.packb({"body": b"", "hsig": bytes(64)}),
    "short hsig": _rewire(_fields(), [], bytes(63)),
    "outer of 4": msgpack.packb([msgpack.packb(_fields(), use_bin_type=True), [], bytes(64), 0], use_bin_type=True),
    "truncated": _rewire(_fields(), [])[:-5],
    "trailing byte": _rewire(_fields(), []) + b"\x00",
    "empty": b"",
    "not bytes": "a string",
    "too long": b"\x00" * (80 * 1024 + 1),
    # the same values in a longer spelling: a second wire form would be a second id for one message
    "epoch as uint 16": _wrap(GOOD_BODY.replace(b"\x01\xa1t\x00", b"\x01\xa1t\xcd\x00\x00")),
    "topic as str 8": _wrap(GOOD_BODY.replace(b"\xa1t", b"\xd9\x01t")),
    "content as bin 16": _wrap(GOOD_BODY.replace(b"\xc4\x01x", b"\xc5\x00\x01x")),
    "body in bin 16": b"\x93\xc5\x00" + bytes([len(GOOD_BODY)]) + GOOD_BODY + b"\x90\xc4\x40" + bytes(64),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_wire_forms_are_refused_as_malformed(name: str) -> None:
    with pytest.raises(CausalError) as caught:
        decode(HOSTILE[name])
    assert caught.value.reason == "malformed"


def test_the_hostile_table_differs_from_a_good_message_only_where_it_says() -> None:
    """The longer-spelling cases are the good message re-spelled, so their refusal is the canonical check's."""
    assert decode(_wrap(GOOD_BODY)).content == b"x"
    for name in ("epoch as uint 16", "topic as str 8", "content as bin 16", "body in bin 16"):
        outer = msgpack.unpackb(HOSTILE[name])
        assert msgpack.unpackb(outer[0]) == _fields(), name


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes_decode_or_raise_causal_error_only(data: bytes) -> None:
    try:
        msg = decode(data)
    except CausalError as error:
        assert error.reason == "malformed"
    else:  # anything that decodes is the canonical form of what it says
        assert msg.wire == data


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 8000), st.integers(0, 300))
def test_flipping_any_bit_of_a_good_message_breaks_the_id_or_the_form(position: int, bit: int) -> None:
    key = SigningKey(SEED)
    good = make(key, "chat/room-1", b"hello", epoch=1, deps=[TopicMsgID(PUBLISHER, GENESIS_HASH, GENESIS_HSIG)])
    wire = bytearray(good.wire)
    wire[position % len(wire)] ^= 1 << (bit % 8)
    try:
        msg = decode(bytes(wire))
    except CausalError:
        return
    # it still parses: then the hash, the signature or a dep's signature no longer matches
    same = msg.hash == good.hash and msg.hsig == good.hsig and msg.deps == good.deps
    assert not same or not verify_id(msg.publisher, msg.hash, msg.hsig)


def test_make_refuses_what_the_contract_does_not_allow() -> None:
    key = SigningKey(SEED)
    dep = make(key, "t", b"").id
    cases = [
        (dict(topic="", content=b""), "bad_topic"),
        (dict(topic="a//b", content=b""), "bad_topic"),
        (dict(topic="t", content=b"x" * (MAX_CONTENT + 1)), "bad_content"),
        (dict(topic="t", content="text"), "bad_content"),
        (dict(topic="t", content=b"", epoch=-1), "bad_epoch"),
        (dict(topic="t", content=b"", epoch=True), "bad_epoch"),
        (dict(topic="t", content=b"", tags=["bad tag"]), "bad_tag"),
        (dict(topic="t", content=b"", tags=[f"t{i}" for i in range(MAX_TAGS + 1)]), "bad_tag"),
        (dict(topic="t", content=b"", deps=[dep.hash]), "bad_dep"),
        (dict(topic="t", content=b"", deps=[TopicMsgID(PUBLISHER, bytes([i]) * 32, bytes(64)) for i in range(MAX_DEPS + 1)]), "bad_dep"),
    ]
    for kwargs, reason in cases:
        with pytest.raises(CausalError) as caught:
            make(key, **kwargs)
        assert caught.value.reason == reason, kwargs


def test_a_tag_string_is_one_tag_not_its_letters() -> None:
    msg = make(SigningKey(SEED), "t", b"", tags="reply")
    assert msg.tags == ("reply",)


@pytest.mark.parametrize("topic", ["x" * 65, "a/" * 8 + "a", "é", "a b", "a/", "/a", 7, None, "a" * 64 + "/" + "b" * 64 + "/" + "c" * 64 + "/d" * 5])
def test_hostile_topics_are_refused(topic) -> None:
    with pytest.raises(CausalError):
        check_topic(topic)


def test_verify_id_refuses_a_wrong_key_a_bad_point_and_a_wrong_hash() -> None:
    key = SigningKey(SEED)
    msg = make(key, "t", b"x")
    other = bytes(SigningKey(b"\x07" * 32).verify_key)
    assert verify_id(PUBLISHER, msg.hash, msg.hsig)
    assert not verify_id(other, msg.hash, msg.hsig)
    assert not verify_id(PUBLISHER, bytes(32), msg.hsig)
    assert not verify_id(b"\xff" * 32, msg.hash, msg.hsig)
    assert not verify_id(PUBLISHER, msg.hash, msg.hsig[:63])
