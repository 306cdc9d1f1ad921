"""The estate layout's ``cast:`` section: read and checked like every layout key, and wired into houses."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowcast.cast import CacheCorrupt, CastService
from flowcast.house.estate import open_house
from flowcast.house.layout import LayoutError, load_layout


def layout(tmp_path: Path, cast: str, houses: str = "") -> Path:
    flows = tmp_path / "flows"
    flows.mkdir(exist_ok=True)
    (flows / "idle.flo").write_text("house idle\nframer idle be active first rest\n  frame rest\n    print resting\n")
    path = tmp_path / "abc.yaml"
    path.write_text(f"""estate: abc
policy:
  - {{allow: subscribe, estate: xyz, share: cast}}
houses:
  - {{name: manor, flow: flows/idle.flo, manor: true}}
  - {{name: w1, flow: flows/idle.flo}}
{houses}
{cast}
""")
    return path


def test_the_section_loads_into_the_cast_spec(tmp_path):
    loaded = load_layout(layout(tmp_path, """cast:
  house: w1
  retention: 3600
  max_bytes: 1048576
  lease: 30.5
  max_subs: 8
  subscribers:
    - {estate: xyz, patterns: ["abc/messages/**", "abc/news/*"]}
    - {estate: xyz, patterns: ["abc/more/**"]}
"""))
    spec = loaded.cast
    assert spec.house == "w1" and spec.dir == loaded.run / "cast"
    config = spec.config
    assert (config.retention, config.max_bytes, config.lease, config.max_subs) == (3600.0, 1 << 20, 30.5, 8)
    assert config.subscribers == {"xyz": ("abc/messages/**", "abc/news/*", "abc/more/**")}
    assert config.may_subscribe("xyz", "abc/messages/bob/*") and not config.may_subscribe("xyz", "abc/**")
    assert loaded.policy[0].access == "subscribe"


def test_an_empty_section_is_the_defaults_in_the_manor_and_no_section_is_no_cast(tmp_path):
    spec = load_layout(layout(tmp_path, "cast:")).cast
    assert spec.house == "manor" and spec.config.retention == 86400.0 and spec.config.subscribers == {}
    assert load_layout(layout(tmp_path, "")).cast is None


@pytest.mark.parametrize("cast, says", [
    ("cast: {retention: -5}", "cast retention is '-5', outside 60..604800 seconds"),
    ("cast: {retention: forever}", "cast retention must be a number of seconds"),
    ("cast: {lease: .nan}", "cast lease is '.nan', outside"),
    ("cast: {max_bytes: 1.5}", "cast max_bytes must be a whole number"),
    ("cast: {retension: 60}", "did you mean 'retention'"),
    ("cast: {house: w2}", "cast house 'w2' is not a house of this layout"),
    ("cast: {subscribers: [{estate: xyz, patterns: ['abc/**/x']}]}", "a pattern of cast subscriber 1 is 'abc/**/x'"),
    ("cast: {subscribers: [{estate: xyz}]}", "patterns"),
    ("cast: {subscribers: [{estate: 'x y', patterns: []}]}", "estate of cast subscriber 1"),
    ("cast: [1, 2]", "cast must be a mapping"),
    ("cast: {lease: 86400}", "cast lease is '86400', outside 1..3600 seconds"),  # the wire's bound, not a run-time refusal
    ("cast: {publish_timeout: 0.5}", "cast publish_timeout is '0.5', outside 1..3600 seconds"),
    ("cast: {publish_resend: 0}", "cast publish_resend is '0', outside 0.05..600 seconds"),
    ("cast: {publish_resend: 40}", "cast publish_resend (40 s) must be less than publish_timeout (30 s)"),
    ("cast: {publish_timeout: 2, publish_resend: 2}", "must be less than publish_timeout (2 s)"),
])
def test_bad_values_are_located_errors(tmp_path, cast, says):
    with pytest.raises(LayoutError) as raised:
        load_layout(layout(tmp_path, cast))
    text = str(raised.value)
    assert says in text
    assert "abc.yaml:8:" in text  # located on the section's line, at the value


def test_the_publish_bound_and_resend_load_and_default_to_30_and_2_seconds(tmp_path):
    config = load_layout(layout(tmp_path, "cast: {publish_timeout: 12.5, publish_resend: 0.5, lease: 3600}")).cast.config
    assert (config.publish_timeout, config.publish_resend, config.lease) == (12.5, 0.5, 3600.0)
    defaults = load_layout(layout(tmp_path, "cast:")).cast.config
    assert (defaults.publish_timeout, defaults.publish_resend) == (30.0, 2.0)


def test_the_layouts_longest_lease_is_the_one_the_wire_accepts():
    from flowcast.cast.wire import MAX_LEASE, read_sub
    from flowcast.house.layoutcast import SECONDS

    assert SECONDS["lease"][1] is None  # read from the wire, never a second copy of the number
    read_sub({"sid": b"s" * 16, "pattern": "abc/**", "cursor": 0, "lease": MAX_LEASE})
    with pytest.raises(Exception, match="lease"):
        read_sub({"sid": b"s" * 16, "pattern": "abc/**", "cursor": 0, "lease": MAX_LEASE + 1})


def test_the_cache_house_must_be_one_house(tmp_path):
    with pytest.raises(LayoutError, match="the cache runs in exactly one house"):
        load_layout(layout(tmp_path, "cast: {house: pool}", "  - {name: pool, flow: flows/idle.flo, count: 2}"))


def test_houses_get_their_service_the_cache_in_the_manor_an_inbox_each(tmp_path):
    loaded = load_layout(layout(tmp_path, "cast:\n  subscribers: [{estate: xyz, patterns: ['abc/**']}]"))
    manor = open_house(loaded, "manor", houses=2)
    w1 = open_house(loaded, "w1", houses=2)
    try:
        assert isinstance(manor.cast, CastService) and manor.cast.publisher is not None
        assert isinstance(w1.cast, CastService) and w1.cast.publisher is None and w1.cast.subscriber is not None
        assert manor.cast.config.subscribers == {"xyz": ("abc/**",)}
        assert (loaded.run / "cast" / "cache.sqlite3").is_file()
        assert (loaded.run / "cast" / "inbox-w1.sqlite3").is_file()
        ticket = manor.cast.publish("abc/messages/alice/1", b"hi", publisher="alice")
        manor.scheduler.call_later(5.0, manor.stop)
        manor.scheduler.spawn(_stop_when(manor, lambda: ticket.done))
        manor.scheduler.run()
    finally:
        for house in (manor, w1):
            house.stop()
            house.run()
    assert ticket.done and ticket.error is None and ticket.seq >= 1


def _stop_when(house, done):
    from flowcast.runtime import sleep

    for _ in range(500):
        if done():
            break
        yield sleep(0.01)
    house.stop()


def test_a_manor_without_the_cache_passes_the_cast_share_on_to_the_cache_house(tmp_path):
    loaded = load_layout(layout(tmp_path, "cast: {house: w1}"))
    manor = open_house(loaded, "manor", houses=2)
    w1 = open_house(loaded, "w1", houses=2)
    try:
        assert manor.cast.publisher is None and w1.cast.publisher is not None
        assert manor.router.forwards == {"cast": "w1"} and w1.router.forwards == {}
    finally:
        for house in (manor, w1):
            house.stop()
            house.run()
    assert manor.router.forwards == {}  # closed with the house


def test_a_corrupt_cache_stops_the_house_from_starting_and_is_not_replaced(tmp_path):
    loaded = load_layout(layout(tmp_path, "cast:"))
    path = loaded.run / "cast" / "cache.sqlite3"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a database" * 100)
    with pytest.raises(CacheCorrupt):
        open_house(loaded, "manor", houses=2)
    assert path.read_bytes() == b"not a database" * 100
    assert not (loaded.run / "lane" / "manor").exists()  # what it opened was closed again
