"""flowcast.cast.names: checks with clear errors, matching, the inside-check, the split filter.

Matching and ``inside`` are compared with brute-force oracles over a small
alphabet: a segment outside every pattern's literals ("w") stands for all
the names a ``*`` can take, and names one segment longer than either
pattern stand for all the lengths a ``**`` can take, so the oracle is exact.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowcast.cast.ids import IdMaker
from flowcast.cast.names import (
    MAX_NAME_BYTES,
    CastNameError,
    Pattern,
    allowed,
    check_name,
    check_pattern,
    check_recipients,
    check_split,
    estate_of,
    inside,
    matches,
    split_hash,
    split_takes,
)

LITERALS = ["x", "y"]
segment = st.sampled_from(LITERALS + ["*"])


@st.composite
def patterns(draw) -> str:
    body = draw(st.lists(segment, min_size=1, max_size=4))
    if draw(st.booleans()):
        body.append("**")
    return "/".join([draw(st.sampled_from(["abc", "*"]))] + body)


def all_names(longest: int) -> list[str]:
    names = []
    for length in range(1, longest):
        for rest in itertools.product(LITERALS + ["w"], repeat=length):
            for estate in ("abc", "zzz"):
                names.append("/".join((estate,) + rest))
    return names


def match_oracle(name: str, pattern: str) -> bool:
    n, p = name.split("/"), pattern.split("/")
    if p[-1] == "**":
        if len(n) < len(p):
            return False
        p, n = p[:-1], n[: len(p) - 1]
    elif len(n) != len(p):
        return False
    return all(ps == "*" or ps == ns for ns, ps in zip(n, p))


@settings(max_examples=300, deadline=None)
@given(patterns())
def test_matching_agrees_with_the_oracle(pattern):
    for name in all_names(len(pattern.split("/")) + 1):
        assert matches(name, pattern) == match_oracle(name, pattern), (name, pattern)


@settings(max_examples=400, deadline=None)
@given(patterns(), patterns())
def test_inside_is_exactly_every_match_of_one_is_a_match_of_the_other(asked, allow):
    longest = max(len(asked.split("/")), len(allow.split("/"))) + 2
    names = [n for n in all_names(longest) if matches(n, asked)]
    expected = all(matches(n, allow) for n in names)
    assert inside(asked, allow) == expected, (asked, allow)


def test_inside_examples():
    assert inside("abc/messages/alice/*", "abc/messages/**")
    assert inside("abc/messages/**", "abc/messages/**")
    assert not inside("abc/**", "abc/messages/**")  # abc/other is not inside
    assert not inside("abc/messages", "abc/messages/**")  # ** is one or more segments
    assert not inside("abc/*/x", "abc/messages/*")
    assert inside("abc/messages/x", "abc/*/x")
    assert not inside("abc/messages/**", "abc/messages/*")


def test_allowed_is_conservative_about_unions():
    assert allowed("abc/messages/bob", ["abc/news/**", "abc/messages/*"])
    assert not allowed("abc/**", ["abc/*", "abc/*/**"])  # covered only by the union: refused
    assert not allowed("abc/messages/bob", [])


@pytest.mark.parametrize(
    "name, words",
    [
        ("abc", "2 to 16 segments"),
        ("/".join(["a"] * 17), "2 to 16 segments"),
        ("abc//x", "bad segment"),
        ("abc/x y", "bad segment"),
        ("abc/" + "x" * 65, "bad segment"),
        ("abc/" + "/".join(["x" * 60] * 5), f"at most {MAX_NAME_BYTES} bytes"),
        ("abc/*", "bad segment"),
        (b"abc/x", "is a string"),
        ("abc/é", "bad segment"),
    ],
)
def test_bad_names_get_a_clear_error(name, words):
    with pytest.raises(CastNameError, match=words) as caught:
        check_name(name)
    assert caught.value.reason == "bad_name" and isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    "pattern, words",
    [
        ("abc/**/x", "only be the last"),
        ("abc/a*", "bad segment"),
        ("abc/***", "bad segment"),
        ("abc/" + "/".join(["*"] * 16), "2 to 16 segments"),
        ("*/" + "*" * 300, "at most 256 bytes"),
    ],
)
def test_bad_patterns_get_a_clear_error(pattern, words):
    with pytest.raises(CastNameError, match=words):
        check_pattern(pattern)


def test_patterns_compile_and_match():
    p = Pattern("abc/messages/*/**")
    assert p.matches("abc/messages/alice/1") and p.matches("abc/messages/alice/1/2")
    assert not p.matches("abc/messages/alice") and not p.matches("xyz/messages/alice/1")
    assert Pattern("abc/a.b").matches("abc/a.b") and not Pattern("abc/a.b").matches("abc/aXb")


def test_recipients():
    assert check_recipients(None) is None
    assert check_recipients(["xyz", "bob@xyz"]) == ("xyz", "bob@xyz")
    assert estate_of("bob@xyz") == "xyz" and estate_of("abc/m/1") == "abc"
    for bad in ("xyz", [], ["a b"], ["@xyz"], ["bob@"], ["a@b@c"], [1], ["x"] * 65):
        with pytest.raises(CastNameError):
            check_recipients(bad)


def test_split_checks():
    assert check_split(None) is None
    assert check_split(["id", 3, 2]) == ("id", 3, 2)
    for bad in (("id", 0, 0), ("id", 1025, 0), ("id", 3, 3), ("id", 3, -1), ("colour", 2, 0),
                ("id", 2.0, 0), ("id", True, 0), ("id", 2), "id,2,0"):
        with pytest.raises(CastNameError):
            check_split(bad)


def test_the_split_hash_is_blake2b_8_big_endian():
    import hashlib

    assert split_hash(b"abc") == int.from_bytes(hashlib.blake2b(b"abc", digest_size=8).digest(), "big")


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 12), st.sampled_from(["id", "publisher", "name"]), st.integers(0, 2**32))
def test_a_split_partitions_the_messages(m, key, seed):
    import random

    make = IdMaker(random_bits=random.Random(seed).getrandbits)
    messages = [(make(), f"abc/m/{i % 7}", f"user{i % 5}") for i in range(60)]
    taken = [[msg for msg in messages if split_takes((key, m, k), *msg)] for k in range(m)]
    assert sum(len(t) for t in taken) == len(messages)  # disjoint and complete
    assert sorted(x for t in taken for x in t) == sorted(messages)
    if key == "publisher":  # one publisher's chain stays on one receiver
        for t in taken:
            publishers = {p for _, _, p in t}
            assert all(p not in publishers for other in taken if other is not t for _, _, p in other)


def test_the_id_split_spreads_evenly():
    make = IdMaker()
    counts = [0, 0, 0, 0]
    for _ in range(8000):
        counts[split_hash(make()) % 4] += 1
    assert min(counts) > 1700  # 2000 expected each; a broken hash puts everything in one
