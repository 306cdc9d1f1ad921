"""Whatever a remote sends a publisher (or a subscriber), a clear counted refusal routed back, never a crash."""

from __future__ import annotations

import pytest

from flowcast.routing import Refused
from flowcast.cast.wire import MAX_MESSAGE
from tests.cast.kit import Cast, payloads

SID = bytes(range(16))


def _sub(**fields):
    data = {"sid": SID, "pattern": "abc/messages/**", "cursor": 0, "lease": 30.0}
    data.update(fields)
    return {k: v for k, v in data.items() if v is not ...}


@pytest.fixture
def cast(tmp_path):
    cast = Cast(tmp_path, others=("xyz", "uvw"), grants={"xyz": ("abc/messages/**",), "uvw": ("abc/messages/**",)})
    cast.estates["xyz"].store("manor").queue("out")
    return cast


def _refusal(cast, data, tag="cast.sub"):
    """Send ``data`` from xyz's manor to abc's cast share; the error report that comes back."""
    errors = cast.estates["xyz"].store("manor").queue("out.error")
    errors.queue.clear()
    cast.estates["xyz"]["manor"].send("cast@.abc", data, src="out", tag=tag)
    assert cast.run_until(lambda: len(errors.queue) == 1, 5), (tag, data)
    return errors.pop()["data"]


BAD_SUBS = [
    ("not a map", ["sid"], "cast_malformed"),
    ("a missing field", _sub(cursor=...), "cast_malformed"),
    ("an unknown field", _sub(extra=1), "cast_malformed"),
    ("a short sid", _sub(sid=b"x"), "cast_malformed"),
    ("a text sid", _sub(sid="x" * 16), "cast_malformed"),
    ("a negative cursor", _sub(cursor=-1), "cast_malformed"),
    ("a text cursor", _sub(cursor="1"), "cast_malformed"),
    ("a huge cursor", _sub(cursor=1 << 63), "cast_malformed"),
    ("a zero lease", _sub(lease=0), "cast_malformed"),
    ("a lease of a year", _sub(lease=3e7), "cast_malformed"),
    ("a split M of 0", _sub(split=["id", 0, 0]), "bad_split"),
    ("a split M over 1024", _sub(split=["id", 2000, 1]), "bad_split"),
    ("a split k outside 0..M-1", _sub(split=["id", 3, 3]), "bad_split"),
    ("a split on an unknown key", _sub(split=["body", 2, 0]), "bad_split"),
    ("a split that is not a triple", _sub(split="id"), "bad_split"),
    ("a huge pattern", _sub(pattern="abc/" + "m" * 300), "too_large"),
    ("a pattern of 17 segments", _sub(pattern="/".join(["abc"] + ["m"] * 16)), "bad_name"),
    ("'**' inside a pattern", _sub(pattern="abc/**/x"), "bad_pattern"),
    ("a segment of bad characters", _sub(pattern="abc/mes sages/*"), "bad_pattern"),
    ("a pattern wider than granted", _sub(pattern="abc/**"), "sub_denied"),
    ("a pattern with a wildcard where the grant has a name", _sub(pattern="abc/*/x"), "sub_denied"),
    ("another estate's prefix", _sub(pattern="xyz/messages/**"), "foreign_prefix"),
    ("a cursor from the future", _sub(cursor=10), "cursor_future"),
]


@pytest.mark.parametrize("why, data, kind", BAD_SUBS, ids=[case[0] for case in BAD_SUBS])
def test_a_bad_subscribe_is_refused_with_its_reason_and_counted(cast, why, data, kind):
    report = _refusal(cast, data)
    assert report["kind"] == kind and report["tag"] == "cast.sub" and report["reason"], why
    assert cast.abc["manor"].counts[kind] == 1
    assert cast.pub.publisher.subs == {}


@pytest.mark.parametrize("tag, data, kind", [
    ("cast.cursor", {"sid": SID}, "cast_malformed"),
    ("cast.cursor", {"sid": SID, "cursor": 3}, "no_subscription"),
    ("cast.cursor", 7, "cast_malformed"),
    ("cast.unsub", {"sid": b"short"}, "cast_malformed"),
    ("cast.unsub", {}, "cast_malformed"),
])
def test_bad_renew_cursor_unsub_and_a_remote_publish_are_refused(cast, tag, data, kind):
    report = _refusal(cast, data, tag)
    assert report["kind"] == kind and report["tag"] == tag


def test_a_publish_from_another_estate_is_refused_even_where_its_policy_lets_it_write(cast):
    assert _refusal(cast, {"name": "abc/messages/x", "data": b"hi"}, "cast.pub")["kind"] == "denied"
    cast.abc["manor"].policy.replace([{"allow": "any", "estate": "xyz"}])
    report = _refusal(cast, {"name": "abc/messages/x", "data": b"hi"}, "cast.pub")
    assert report["kind"] == "foreign_publish" and cast.cache.stats()["messages"] == 0


def test_a_cursor_beyond_what_was_sent_is_from_the_future(cast):
    cast.publish_many(3)
    cast.estates["xyz"]["manor"].send("cast@.abc", _sub(), src="out", tag="cast.sub")
    assert cast.run_until(lambda: len(cast.pub.publisher.subs) == 1, 5)
    report = _refusal(cast, {"sid": SID, "cursor": 3 + 1}, "cast.cursor")
    assert report["kind"] == "cursor_future" and "future" in report["reason"]


def test_more_subscriptions_than_a_remotes_cap_are_refused_and_others_are_not_affected(cast):
    out = cast.estates["xyz"].store("manor").queue("out.error")
    for i in range(64):
        cast.estates["xyz"]["manor"].send("cast@.abc", _sub(sid=i.to_bytes(16, "big")), src="out", tag="cast.sub")
    assert cast.run_until(lambda: len(cast.pub.publisher.subs) == 64, 10) and not out.queue
    report = _refusal(cast, _sub(sid=b"\xff" * 16))
    assert report["kind"] == "too_many_subs" and "64" in report["reason"]
    # renewing one of the 64 is not a new one; another estate has its own cap
    cast.estates["xyz"]["manor"].send("cast@.abc", _sub(sid=(5).to_bytes(16, "big")), src="out", tag="cast.sub")
    sub = cast.service("uvw", "bob").subscribe("abc/messages/**", into="inbox")
    cast.publish_many(2)
    assert cast.run_until(lambda: len(cast.queue("uvw", "bob").queue) == 2, 10) and sub.state == "active"
    assert not out.queue and cast.pub.publisher.per_remote["xyz"] == 64


def test_recipients_limit_a_message_to_their_estates_and_a_forged_list_is_refused(cast):
    at_xyz = cast.service("xyz", "bob").subscribe("abc/messages/**", into="inbox")
    at_uvw = cast.service("uvw", "bob").subscribe("abc/messages/**", into="inbox")
    for_uvw = cast.pub.publish("abc/messages/alice/1", b"to carol", recipients=["carol@uvw"])
    public = cast.pub.publish("abc/messages/alice/2", b"to all")
    both = cast.pub.publish("abc/messages/alice/3", b"to both", recipients=["bob@xyz", "uvw"])
    assert cast.run_until(lambda: len(cast.queue("uvw", "bob").queue) == 3, 10)
    cast.world.run_for(3)
    assert payloads(cast.queue("xyz", "bob")) == [b"to all", b"to both"]
    assert payloads(cast.queue("uvw", "bob")) == [b"to carol", b"to all", b"to both"]
    for forged in (["carol@uvw", "not a name"], ["@"], "uvw", [f"u{i}@x" for i in range(65)], [], [7]):
        with pytest.raises(Refused) as caught:
            cast.pub.publish("abc/messages/alice/4", b"x", recipients=forged)
        assert caught.value.kind == "bad_recipients"
    assert for_uvw.done and public.done and both.done and at_xyz.state == at_uvw.state == "active"


def test_a_message_over_the_size_limit_another_prefix_or_a_bad_name_is_refused_before_the_cache(cast):
    for name, data, kind in [
        ("abc/messages/big", bytes(MAX_MESSAGE + 1), "too_large"),
        ("abc/messages/list", ["x" * 1000] * 300, "bad_data"),
        ("abc/messages/text", "text", "bad_data"),
        ("xyz/messages/alice", b"x", "foreign_prefix"),
        ("abc", b"x", "bad_name"),
        ("abc/has space", b"x", "bad_name"),
        ("abc/" + "x" * 300, b"x", "too_large"),
    ]:
        with pytest.raises(Refused) as caught:
            cast.pub.publish(name, data)
        assert caught.value.kind == kind, name
    fits = cast.pub.publish("abc/messages/fits", bytes(MAX_MESSAGE))  # the limit itself is allowed
    assert cast.run_until(lambda: fits.done, 5) and fits.seq == 1 and cast.cache.stats()["messages"] == 1


def test_forged_and_malformed_batches_at_a_subscriber_are_refused_and_delivery_goes_on(cast):
    sub = cast.service("xyz", "bob").subscribe("abc/messages/**", into="inbox")
    assert cast.run_until(lambda: sub.state == "active", 5)
    share = sub.share
    abc = cast.abc["manor"]
    abc.store.queue("out")
    errors = abc.store.queue("out.error")
    good_msg = [1, bytes(16), "abc/messages/x", "mallory", 1.0, b"forged"]
    for data in (
        {"sid": b"\x00" * 16, "after": 0, "upto": 1, "msgs": [good_msg]},  # a sid it does not hold
        {"sid": sub.sid, "after": 0, "upto": 1, "msgs": [[2, bytes(16), "abc/x", "m", 1.0, b""]]},  # seq past upto
        {"sid": sub.sid, "after": 5, "upto": 1, "msgs": []},
        {"sid": sub.sid, "after": 0, "upto": 2, "msgs": [[1, b"short", "abc/x", "m", 1.0, b""]]},
        {"sid": sub.sid, "after": 0, "upto": 2, "msgs": "many"},
        {"sid": sub.sid, "from": 0},
    ):
        abc.send(f"{share}@bob.xyz", data, src="out", tag="cast.batch")
    assert cast.run_until(lambda: len(errors.queue) == 6, 5)
    kinds = sorted(e["data"]["kind"] for e in errors.queue)
    assert kinds == ["cast_malformed"] * 5 + ["no_subscription"]
    # from another estate, even a well-formed batch for a real sid is not taken
    cast.estates["uvw"]["manor"].store.queue("out")
    cast.estates["uvw"]["manor"].send(f"{share}@bob.xyz", {"sid": sub.sid, "after": 0, "upto": 1, "msgs": [good_msg]}, src="out", tag="cast.batch")
    cast.world.run_for(2)
    assert payloads(cast.queue("xyz", "bob")) == []
    cast.publish_many(3)
    assert cast.run_until(lambda: len(cast.queue("xyz", "bob").queue) == 3, 10)
