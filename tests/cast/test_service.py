"""CastService wiring: publishing from a house without the cache, the inbox file, the layout's cast section."""

from __future__ import annotations

import pytest

from flowcast.cast import CastConfig, CastConfigError, CastService, InboxCorrupt
from flowcast.cast.inbox import Inbox
from flowcast.cast.wire import MAX_MESSAGE
from flowcast.routing import Refused
from tests.cast.kit import Cast, payloads


def test_a_house_without_the_cache_publishes_down_the_lane_and_hears_durable_or_refused(tmp_path):
    cast = Cast(tmp_path, max_bytes=210)  # five of these fit, a sixth does not
    w1 = CastService(cast.abc["w1"])
    sub = cast.service().subscribe("abc/messages/**", estate="abc", into="inbox")
    tickets = [w1.publish(f"abc/messages/w1/{i}", b"w%d" % i, publisher="alice") for i in range(5)]
    assert not any(t.done for t in tickets)
    assert cast.run_until(lambda: all(t.done for t in tickets), 5)
    assert [t.seq for t in tickets] == [1, 2, 3, 4, 5] and not any(t.error or t.duplicate for t in tickets)
    retry = w1.publish("abc/messages/w1/0", b"w0", id=tickets[0].id)
    assert cast.run_until(lambda: retry.done, 5) and retry.duplicate and retry.seq == 1
    assert cast.run_until(lambda: sub.cursor == 5, 10) and payloads(cast.queue()) == [b"w%d" % i for i in range(5)]
    full = w1.publish("abc/messages/w1/full", b"x" * 10)  # refused, with the reason, to its ticket
    assert cast.run_until(lambda: full.done, 5)
    assert full.error is not None and "cache_full" in str(full.error) and cast.cache.stats()["messages"] == 5
    with pytest.raises(Refused):
        w1.publish("xyz/messages/w1", b"x")  # refused before it leaves the house
    with pytest.raises(Refused):
        w1.publish("abc/messages/w1/big", bytes(MAX_MESSAGE + 1))


def test_a_corrupt_inbox_is_refused_and_left_as_it_was(tmp_path):
    path = tmp_path / "inbox.sqlite3"
    path.write_bytes(b"not a database, but somebody's data" * 100)
    before = path.read_bytes()
    with pytest.raises(InboxCorrupt, match="inbox.sqlite3"):
        Inbox(path)
    assert path.read_bytes() == before
    good = Inbox(tmp_path / "good.sqlite3")
    good.add(b"s" * 16, "key", 3)
    good.commit(b"s" * 16, 9, [(b"i" * 16, 100.0)])
    good.close()
    again = Inbox(tmp_path / "good.sqlite3")
    assert again.find("key") == (b"s" * 16, 9) and again.seen(b"s" * 16, [b"i" * 16, b"j" * 16]) == {b"i" * 16}
    assert again.forget(101.0) == 1 and again.seen(b"s" * 16, [b"i" * 16]) == set()


def test_the_layouts_cast_section_is_read_or_refused_with_the_key():
    config = CastConfig.from_mapping({"lease": 30, "window": 100, "subscribers": [{"estate": "xyz", "patterns": ["abc/messages/**"]}]})
    assert config.lease == 30 and config.window == 100
    assert config.may_subscribe("xyz", "abc/messages/alice/*") and config.may_subscribe("xyz", "abc/messages/**")
    assert not config.may_subscribe("xyz", "abc/**") and not config.may_subscribe("uvw", "abc/messages/**")
    for bad, word in [({"leese": 3}, "leese"), ({"lease": -1}, "lease"), ({"subscribers": [{"estate": "x"}]}, "subscribers"),
                      ({"subscribers": [{"estate": "x", "patterns": ["a/**/b"]}]}, "subscribers"),
                      ({"lease": 86400}, "at most 3600"), ({"publish_resend": 30}, "publish_resend")]:
        with pytest.raises(CastConfigError, match=word):
            CastConfig.from_mapping(bad)


def test_a_subscription_refused_by_the_publisher_says_why_and_stops_renewing(tmp_path):
    cast = Cast(tmp_path, grants={"xyz": ("abc/public/**",)})
    sub = cast.service().subscribe("abc/messages/**", estate="abc", into="inbox")
    assert cast.run_until(lambda: sub.state == "refused", 5)
    assert "sub_denied" in sub.error and "abc/messages/**" in sub.error
    sent = cast.service().subscriber.counts["subs_sent"]
    cast.world.run_for(120)
    assert cast.service().subscriber.counts["subs_sent"] == sent
    ok = cast.service().subscribe("abc/public/*", estate="abc", into="public")
    cast.pub.publish("abc/public/news", b"hi")
    assert cast.run_until(lambda: ok.delivered == 1, 5)


def test_closing_a_subscription_ends_the_lease_at_once_and_keeps_the_cursor(tmp_path):
    cast = Cast(tmp_path)
    svc = cast.service()
    sub = svc.subscribe("abc/messages/**", estate="abc", into="inbox")
    cast.publish_many(4)
    assert cast.run_until(lambda: sub.cursor == 4, 5)
    sub.close()
    assert cast.run_until(lambda: cast.pub.publisher.subs == {}, 5) and sub.state == "closed"
    cast.publish_many(3, prefix="abc/messages/later")
    cast.world.run_for(2)
    assert len(cast.queue().queue) == 4
    again = svc.subscribe("abc/messages/**", estate="abc", into="inbox")
    assert again.cursor == 4 and cast.run_until(lambda: again.cursor == 7, 5) and len(cast.queue().queue) == 7


def test_attach_puts_the_service_in_the_houses_cast_slot_and_closes_it_with_the_house(tmp_path):
    cast = Cast(tmp_path)

    class House:  # the HouseLike parts attach uses
        cast = None

        def __init__(self):
            self.closers = []

        def on_close(self, fn):
            self.closers.append(fn)

    house = House()
    svc = cast.service().attach(house)
    sub = svc.subscribe("abc/messages/**", estate="abc", into="inbox")
    assert house.cast is svc and cast.run_until(lambda: sub.state == "active", 5)
    for close in house.closers:
        close()
    assert sub.state == "closed" and cast.run_until(lambda: cast.pub.publisher.subs == {}, 5)


def test_subscribing_again_after_a_refusal_hears_its_own_refusal(tmp_path):
    cast = Cast(tmp_path, grants={"xyz": ("abc/public/**",)})
    first = cast.service().subscribe("abc/messages/**", estate="abc", into="inbox")
    assert cast.run_until(lambda: first.state == "refused", 5)
    again = cast.service().subscribe("abc/messages/**", estate="abc", into="inbox")
    assert again.sid == first.sid  # the same subscription, resumed
    assert cast.run_until(lambda: again.state == "refused", 5) and "sub_denied" in again.error
