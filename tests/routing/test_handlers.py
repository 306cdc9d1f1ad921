"""Tags with a meaning plug into the router (Router.handle), and parcels carry header extensions."""

from __future__ import annotations

import msgpack
import pytest

from flowcast.routing.parcel import MAX_EXT, ParcelError, open_ext, open_header, pack_message
from flowcast.routing.policy import declare_access
from tests.routing.kit import World

SUBSCRIBE = declare_access("subscribe")


@pytest.fixture
def world():
    return World(seed=11)


def _pair(world, beta_policy):
    alpha = world.routed_estate("alpha", ["manor", "w1"], policy=[{"allow": "any", "estate": "beta"}])
    beta = world.routed_estate("beta", ["manor", "w1"], policy=beta_policy)
    world.connect(alpha, beta)
    return alpha, beta


def test_a_tag_registered_from_outside_gets_the_whole_message_and_can_reply(world):
    alpha, beta = _pair(world, [{"allow": "write", "estate": "alpha"}])
    seen = []

    def subscribe(landing):
        seen.append(landing)
        landing.reply({"granted": landing.data["lease"]}, tag="granted")

    beta["w1"].handle("sub", subscribe)
    beta.store("w1").share("board", {"x": 1})
    answers = alpha.store("w1").queue("answers")
    assert alpha["w1"].send("board@w1.beta", {"lease": 30}, src="answers", tag="sub", ext={"id": b"m1", "seq": 7})
    assert world.run_until(lambda: len(answers.queue) == 1, 5)
    (landing,) = seen
    assert (landing.tag, landing.data, landing.reliable) == ("sub", {"lease": 30}, True)
    assert tuple(landing.src) == ("answers", "w1", "alpha", "main") and tuple(landing.dst) == ("board", "w1", "beta", "main")
    assert landing.ext == {"id": b"m1", "seq": 7} and landing.share is beta.store("w1").get("board")
    assert isinstance(landing.stamp, float)
    (answer,) = answers.drain()
    assert answer["tag"] == "granted" and answer["data"] == {"granted": 30}
    assert beta.store("w1").get("board").fields() == {"x": 1}  # handled, not landed as data


def test_a_handler_hears_whether_the_message_came_reliably(world):
    alpha, beta = _pair(world, [{"allow": "write", "estate": "alpha"}])
    seen = []
    beta["manor"].handle("tick", seen.append)
    beta.store("manor").share("board")
    alpha["manor"].send("board@.beta", 1, tag="tick", reliable=False)
    assert world.run_until(lambda: len(seen) == 1, 5)
    assert seen[0].reliable is False and seen[0].ext == {}


def test_access_is_checked_by_the_policy_before_the_handler_runs(world):
    alpha, beta = _pair(world, [{"allow": "write", "estate": "alpha"}])
    called = []
    beta["manor"].handle("sub", called.append, access=SUBSCRIBE)
    beta.store("manor").share("board")
    errors = alpha.store("manor").queue("out.error")
    alpha.store("manor").queue("out")
    alpha["manor"].send("board@.beta", {}, src="out", tag="sub")
    assert world.run_until(lambda: len(errors.queue) == 1, 5)
    error = errors.pop()["data"]
    assert error["kind"] == "denied" and "subscribe of 'board'" in error["reason"]
    assert called == [] and beta["manor"].policy.counts["denied"] == 1

    # a rule granting the permission lets it through to the handler
    beta.store("manor").share("flowcast.policy").update(rules=[{"allow": "subscribe", "estate": "alpha", "share": "board"}])
    alpha["manor"].send("board@.beta", {}, src="out", tag="sub")
    assert world.run_until(lambda: len(called) == 1, 5)


def test_a_handler_that_raises_is_counted_answered_and_the_router_goes_on(world):
    alpha, beta = _pair(world, [{"allow": "write", "estate": "alpha"}])

    def broken(landing):
        raise RuntimeError("boom")

    beta["manor"].handle("bad", broken)
    beta.store("manor").share("board")
    alpha.store("manor").queue("out")
    errors = alpha.store("manor").queue("out.error")
    alpha["manor"].send("board@.beta", 1, src="out", tag="bad")
    assert world.run_until(lambda: len(errors.queue) == 1, 5)
    error = errors.pop()["data"]
    assert error["kind"] == "handler_failed" and "boom" in error["reason"] and error["tag"] == "bad"
    assert beta["manor"].counts["handler_failed"] == 1
    alpha["manor"].send("board@.beta", {"after": 1}, src="out", tag="t")
    assert world.run_until(lambda: beta.store("manor").get("board").get("after") == 1, 5)


def test_a_handler_refuses_through_the_routers_error_path(world):
    alpha = world.routed_estate("alpha", ["manor"])
    router = alpha["manor"]
    router.handle("lease", lambda landing: landing.refuse("no such lease", "no_lease"))
    router.store.share("board")
    errors = router.store.queue("out.error")
    router.store.queue("out")
    assert router.send("board", 1, src="out", tag="lease") is False
    assert router.counts["no_lease"] == 1 and errors.pop()["data"]["reason"] == "no such lease"


def test_a_tag_has_one_handler_and_bad_registrations_raise():
    world = World(seed=1)
    router = world.routed_estate("alpha", ["manor"])["manor"]
    router.handle("sub", lambda landing: None)
    for tag in ("sub", "read", "error", "value"):
        with pytest.raises(ValueError, match="already has a handler"):
            router.handle(tag, lambda landing: None)
    with pytest.raises(ValueError, match="access"):
        router.handle("x", lambda landing: None, access="wrte")
    with pytest.raises(ValueError):
        router.handle("", lambda landing: None)
    with pytest.raises(ValueError):
        router.handle("y", "not callable")  # type: ignore[arg-type]


def test_unknown_tags_and_unknown_extensions_land_as_data(world):
    alpha, beta = _pair(world, [{"allow": "write", "estate": "alpha"}])
    beta.store("manor").share("board")
    alpha["manor"].send("board@.beta", {"n": 1}, tag="whatever", ext={"nobody_knows": [1, 2, 3]})
    assert world.run_until(lambda: beta.store("manor").get("board").get("n") == 1, 5)


def _capture(router, tag):
    seen = []
    router.handle(tag, seen.append)
    return seen


def test_a_manor_forwards_extensions_byte_for_byte(world):
    alpha, beta = _pair(world, [{"allow": "write", "estate": "alpha"}])
    beta.store("w1").share("board")
    seen = _capture(beta["w1"], "signed")
    # Not msgpack's shortest form (uint64 for 7, str8 for "ab"): a repacking router would change it.
    ext = b"\x82\xa3seq\xcf" + (7).to_bytes(8, "big") + b"\xa3sig\xd9\x02ab"
    for channel in ("main", "elsewhere"):  # the same channel, and one the manor rewrites
        head = b"\x95" + msgpack.packb(["out", "manor", "alpha", channel]) + msgpack.packb(["board", "w1", "beta", "main"])
        head += msgpack.packb("signed") + msgpack.packb(1.5) + ext
        parcel = len(head).to_bytes(4, "big") + head + msgpack.packb({"n": 1})
        alpha.roads["main"].send_bytes(parcel, "beta")
        assert world.run_until(lambda: len(seen) == 1, 5)
        landing = seen.pop()
        assert landing.ext == {"seq": 7, "sig": "ab"}
        got = bytes(landing.parcel)
        n = int.from_bytes(got[:4], "big")
        assert got[4 + n - len(ext) : 4 + n] == ext
        if channel == "main":
            assert got == parcel
        else:
            assert open_header(got)[0][3] == "main"  # the source channel is the road it came in on


def test_a_local_send_with_extensions_lands_them(world):
    router = world.routed_estate("alpha", ["manor"])["manor"]
    router.store.share("board")
    seen = _capture(router, "signed")
    assert router.send("board", {"n": 1}, tag="signed", ext={"id": "x"})
    assert seen[0].ext == {"id": "x"} and seen[0].data == {"n": 1}


def test_extensions_are_checked_when_sent():
    world = World(seed=1)
    router = world.routed_estate("alpha", ["manor"])["manor"]
    router.store.share("board")
    with pytest.raises(ParcelError, match="512-byte limit"):
        router.send("board", 1, ext={"k": b"x" * MAX_EXT})
    with pytest.raises(ParcelError, match="scalar"):
        router.send("board", 1, ext={"k": {"nested": 1}})
    with pytest.raises(ParcelError, match="name"):
        router.send("board", 1, ext={"": 1})


def test_four_element_parcels_still_parse_and_have_no_extensions():
    parcel = pack_message(["a", "", "", ""], ["b", "", "", ""], "t", 1.0, 2)
    assert parcel[4] == 0x94 and open_ext(parcel) == {}
    src, dst, tag, stamp, offset = open_header(parcel)
    assert (src, tag, stamp) == (("a", "", "", ""), "t", 1.0)
    with_ext = pack_message(["a", "", "", ""], ["b", "", "", ""], "t", 1.0, 2, ext={"id": 1})
    assert open_header(with_ext)[:4] == (src, dst, tag, stamp) and open_ext(with_ext) == {"id": 1}
    assert msgpack.unpackb(with_ext[open_header(with_ext)[4] :]) == 2


def test_oversized_extensions_from_a_road_are_a_counted_drop_with_the_reason(world):
    alpha, beta = _pair(world, [{"allow": "write", "estate": "alpha"}])
    beta.store("manor").share("board")
    seen = _capture(beta["manor"], "signed")
    head = msgpack.packb([["out", "manor", "alpha", "main"], ["board", "manor", "beta", "main"], "signed", 1.0, {"sig": b"x" * MAX_EXT}])
    alpha.roads["main"].send_bytes(len(head).to_bytes(4, "big") + head + msgpack.packb(1), "beta")
    assert world.run_until(lambda: beta["manor"].counts["malformed"] == 1, 5)
    assert "512-byte limit" in beta["manor"].denials[-1]["reason"] and seen == []
    assert beta["manor"].counts["errors_sent"] == 0  # a malformed parcel's source is not answered


def test_allow_any_grants_write_and_read_but_not_a_declared_permission():
    """Was (found in review): ``allow: any`` silently granted every permission a layer declared later."""
    from flowcast.routing.policy import Policy

    policy = Policy([{"allow": "any", "estate": "beta"}])
    assert policy.allows("write", "beta", "", "s", "", "main") and policy.allows("read", "beta", "", "s", "", "main")
    assert not policy.allows(SUBSCRIBE, "beta", "", "s", "", "main")
    named = Policy([{"allow": SUBSCRIBE, "estate": "beta"}])
    assert named.allows(SUBSCRIBE, "beta", "", "s", "", "main")
    denied = Policy([{"deny": "any", "estate": "beta"}, {"allow": SUBSCRIBE}])
    assert not denied.allows(SUBSCRIBE, "beta", "", "s", "", "main")


def test_a_new_tag_cannot_take_reply_access():
    """Was (found in review): a tag registered with access="reply" let any number of messages past the policy."""
    world = World(seed=12)
    alpha = world.routed_estate("alpha", ["manor"], policy=[])
    with pytest.raises(ValueError, match="reply"):
        alpha["manor"].handle("ack", lambda landing: None, access="reply")


def test_extensions_with_a_repeated_key_or_a_key_that_is_not_a_name_are_malformed():
    """Was (found in review): ``{sig: A, sig: B}`` decoded to B here and may decode to A elsewhere."""
    head = msgpack.packb([["out", "", "alpha", "main"], ["board", "", "beta", "main"], "t", 1.0])[1:]
    twice = b"\x82" + msgpack.packb("sig") + msgpack.packb(b"A") + msgpack.packb("sig") + msgpack.packb(b"B")
    for ext, reason in ((twice, "repeat a key"), (msgpack.packb({"s\nig": 1}), "not a name"), (msgpack.packb([1]), "not a map")):
        whole = b"\x95" + head + ext
        parcel = len(whole).to_bytes(4, "big") + whole + msgpack.packb(1)
        with pytest.raises(ParcelError, match=reason):
            open_ext(parcel)
    with pytest.raises(ParcelError, match="not a name"):
        pack_message(("out", "", "alpha", "main"), ("b", "", "beta", "main"), "t", 1.0, 1, {"a b": 1})


def test_unhandle_stops_a_handler_and_lets_another_take_the_tag(world):
    alpha, beta = _pair(world, [{"allow": "write", "estate": "alpha"}])
    first, second = [], []
    beta["w1"].handle("sub", first.append)
    assert not beta["w1"].unhandle("sub", second.append)  # not its handler: left alone
    assert beta["w1"].unhandle("sub", first.append) and not beta["w1"].unhandle("sub")
    beta["w1"].handle("sub", second.append)  # a service started again in the same house
    beta.store("w1").share("board", {"x": 1})
    assert alpha["w1"].send("board@w1.beta", {"n": 1}, src="answers", tag="sub")
    assert world.run_until(lambda: len(second) == 1, 5)
    assert first == []
