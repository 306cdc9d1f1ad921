"""The stock behaviours ``cast publish`` and ``cast subscribe`` in real flows on the simulated network.

What a flow author relies on: items leave the source only into the cache,
acknowledgements and refusals come back to the flow, deliveries land once
in the queue, and a subscription's lease lives exactly as long as its frame.
"""

from __future__ import annotations

import msgpack
import pytest

from flowcast.flow.errors import FlowErrors
from tests.cast.flowkit import FlowWorld, build

PUBLISHER = """house abc
framer pub be active first run
  frame run
    do queue to outbox at enter
    do queue to acks at enter
    do cast publish from outbox to acks with name "abc/messages/alice/{id}" publisher "alice" recipients "bob@xyz"
"""

SUBSCRIBER = """house bob
init ctl with stop false
framer sub be active first held
  frame held
    do queue to inbox with bound 100000 at enter
    do cast subscribe to inbox with pattern "abc/messages/**" estate "abc" %s
    go dropped if stop in ctl
  frame dropped
    go held if not stop in ctl
"""


def flows(bob: str = "", carol: str | None = None) -> dict:
    out = {("abc", "manor"): PUBLISHER, ("xyz", "bob"): SUBSCRIBER % bob}
    if carol is not None:
        out[("xyz", "carol")] = SUBSCRIBER.replace("house bob", "house carol") % carol
    return out


def publish(w: FlowWorld, texts: list[str]) -> None:
    outbox = w.store("abc", "manor").queue("outbox")
    for text in texts:
        outbox.push(text)


def delivered(w: FlowWorld, yard: str = "bob") -> list[bytes]:
    return [item["data"] for item in w.store("xyz", yard).queue("inbox").queue if item["tag"] == "cast"]


def test_publish_from_a_queue_reaches_a_subscribing_flow_once_in_order_with_acks(tmp_path):
    w = FlowWorld(tmp_path, flows())
    texts = [f"hello {i}" for i in range(300)]
    publish(w, texts)
    acks = w.store("abc", "manor").queue("acks")
    assert w.run_until(lambda: len(acks.queue) == 300 and len(delivered(w)) == 300, 60)
    assert delivered(w) == [t.encode() for t in texts]
    seqs = [ack["seq"] for ack in acks.queue]
    assert seqs == sorted(seqs) and not any(ack["duplicate"] for ack in acks.queue)
    first = w.store("xyz", "bob").queue("inbox").queue[0]
    assert first["name"] == "abc/messages/alice/" + first["id"].hex() and first["publisher"] == "alice"
    assert not w.store("abc", "manor").queue("outbox").queue  # every item handed over


YAML_PUBLISHER = """house: abc
framers:
- framer: pub
  be: active
  frames:
  - frame: run
    acts:
    - {do: queue, to: outbox, at: enter}
    - do: cast publish
      with: {name: "abc/messages/alice/{id}", publisher: alice}
      from: outbox
"""

YAML_SUBSCRIBER = """house: carol
framers:
- framer: sub
  be: active
  frames:
  - frame: held
    acts:
    - {do: queue, to: inbox, at: enter}
    - do: cast subscribe
      with: {pattern: abc/messages/**, estate: abc, mod: 2, k: 1, key: publisher}
      to: inbox
"""


def test_the_same_behaviours_in_yaml_flows_and_a_publisher_split_keeps_a_chain_together(tmp_path):
    from flowcast.cast.names import split_takes

    k = next(k for k in (0, 1) if split_takes(("publisher", 2, k), b"\0" * 16, "abc/messages/alice/x", "alice"))
    subscribers = {("xyz", "carol"): YAML_SUBSCRIBER.replace("k: 1", f"k: {k}"),
                   ("xyz", "bob"): YAML_SUBSCRIBER.replace("house: carol", "house: bob").replace("k: 1", f"k: {1 - k}")}
    w = FlowWorld(tmp_path, {("abc", "manor"): YAML_PUBLISHER, **subscribers})
    publish(w, [f"chain {i}" for i in range(20)])
    assert w.run_until(lambda: len(delivered(w, "carol")) == 20, 30)
    w.world.run_for(5)
    assert delivered(w, "carol") == [f"chain {i}".encode() for i in range(20)]
    assert delivered(w, "bob") == []  # the whole chain on one receiver


def test_a_flow_in_a_house_without_the_cache_publishes_through_the_lane(tmp_path):
    w = FlowWorld(tmp_path, {("abc", "w1"): PUBLISHER, ("xyz", "bob"): SUBSCRIBER % ""})
    outbox, acks = w.store("abc", "w1").queue("outbox"), w.store("abc", "w1").queue("acks")
    errors = w.store("abc", "w1").queue("outbox.error")
    for i in range(100):
        outbox.push(f"via lane {i}")
    outbox.push(b"z" * (300 << 10))  # refused in w1 before it leaves the house
    assert w.run_until(lambda: len(acks.queue) == 100 and len(delivered(w)) == 100 and len(errors.queue) == 1, 60)
    assert delivered(w) == [f"via lane {i}".encode() for i in range(100)]
    assert sorted(a["seq"] for a in acks.queue) == [a["seq"] for a in acks.queue]
    assert errors.queue[0]["reason"] == "too_large"


def test_a_value_share_publishes_each_change_as_msgpack(tmp_path):
    text = PUBLISHER.replace("do cast publish from outbox", "do cast publish from reading")
    w = FlowWorld(tmp_path, {("abc", "manor"): text, ("xyz", "bob"): SUBSCRIBER % ""})
    reading = w.store("abc", "manor").share("reading")
    reading.update(t=21)
    assert w.run_until(lambda: len(delivered(w)) == 1, 30)
    reading.update(t=22)
    assert w.run_until(lambda: len(delivered(w)) == 2, 30)
    assert [msgpack.unpackb(d) for d in delivered(w)] == [{"t": 21}, {"t": 22}]


def test_leaving_the_frame_ends_the_lease_and_reentering_resumes_from_the_cursor(tmp_path):
    w = FlowWorld(tmp_path, flows())
    publisher = w.services[("abc", "manor")].publisher
    ctl = w.store("xyz", "bob").share("ctl")
    publish(w, [f"a{i}" for i in range(50)])
    assert w.run_until(lambda: len(delivered(w)) == 50, 60)
    assert len(publisher.subs) == 1
    ctl.update(stop=True)
    # the unsubscribe goes at once: long before the 60 s lease could run out
    assert w.run_until(lambda: not publisher.subs, 5)
    assert w.services[("xyz", "bob")].subscriber.subs == {}
    publish(w, [f"b{i}" for i in range(50)])
    w.world.run_for(10)
    assert len(delivered(w)) == 50  # no lease, nothing forwarded
    ctl.update(stop=False)
    assert w.run_until(lambda: len(delivered(w)) == 100, 60)
    assert delivered(w) == [f"a{i}".encode() for i in range(50)] + [f"b{i}".encode() for i in range(50)]


def test_the_lease_is_renewed_while_the_frame_is_active(tmp_path):
    w = FlowWorld(tmp_path, flows())
    publisher = w.services[("abc", "manor")].publisher
    assert w.run_until(lambda: len(publisher.subs) == 1, 30)
    w.world.run_for(300)  # five leases of 60 s
    assert len(publisher.subs) == 1
    publish(w, ["late"])
    assert w.run_until(lambda: delivered(w) == [b"late"], 30)


def test_two_receivers_split_with_mod_2_take_disjoint_halves(tmp_path):
    w = FlowWorld(tmp_path, flows(bob="mod 2 k 0", carol="mod 2 k 1"))
    texts = [f"m{i}" for i in range(200)]
    publish(w, texts)
    assert w.run_until(lambda: len(delivered(w, "bob")) + len(delivered(w, "carol")) == 200, 60)
    bob, carol = set(delivered(w, "bob")), set(delivered(w, "carol"))
    assert not bob & carol and bob | carol == {t.encode() for t in texts}
    assert 40 < len(bob) < 160  # both take a share


def test_a_denied_subscription_is_reported_to_the_flow(tmp_path):
    w = FlowWorld(tmp_path, flows(), grants={"xyz": ("abc/other/**",)})
    errors = w.store("xyz", "bob").queue("inbox.error")
    assert w.run_until(lambda: len(errors.queue) == 1, 30)
    assert "sub_denied" in errors.queue[0]["reason"]


def test_a_refused_publish_comes_back_with_its_data(tmp_path):
    w = FlowWorld(tmp_path, flows())
    publish(w, [b"x" * (300 << 10), "small"])  # over the 256 KiB limit, then a good one
    acks = w.store("abc", "manor").queue("acks")
    errors = w.store("abc", "manor").queue("outbox.error")
    assert w.run_until(lambda: len(acks.queue) == 1 and len(errors.queue) == 1, 30)
    assert errors.queue[0]["reason"] == "too_large" and errors.queue[0]["data"] == b"x" * (300 << 10)
    assert w.run_until(lambda: delivered(w) == [b"small"], 30)


@pytest.mark.parametrize("yard", ["manor", "w1"])
def test_a_full_cache_refuses_to_the_flow_and_keeps_the_item(tmp_path, yard):
    """In the cache's house the refusal is the cache's; in another house it comes back over the lane."""
    w = FlowWorld(tmp_path, {("abc", yard): PUBLISHER, ("xyz", "bob"): SUBSCRIBER % ""}, max_bytes=2000)  # room for a few
    outbox = w.store("abc", yard).queue("outbox")
    for _ in range(10):
        outbox.push("y" * 500)
    errors = w.store("abc", yard).queue("outbox.error")
    acks = w.store("abc", yard).queue("acks")
    assert w.run_until(lambda: len(acks.queue) + len(errors.queue) == 10, 30)
    assert 0 < len(acks.queue) < 10
    assert all(e["reason"] == "cache_full" and e["data"] == b"y" * 500 for e in errors.queue)


def test_refusal_words_however_they_came():
    from flowcast.cast import CacheFull, CastNameError
    from flowcast.cast.behaviours import word
    from flowcast.routing import Refused

    assert word(CacheFull("full")) == "cache_full"
    assert word(Refused("no", "too_large")) == "too_large"
    assert word(Refused("cache_full: over the limit", "publish_refused")) == "cache_full"
    assert word(Refused("the cache's house could not be reached", "publish_refused")) == "publish_refused"
    assert word(CastNameError("bad")) == "bad_name"
    assert word(RuntimeError("?")) == "RuntimeError"


@pytest.mark.parametrize("args, says", [
    ('pattern "abc/messages/**" mod 2 k 5', "k is an integer from 0"),
    ('pattern "abc/**/x"', "pattern"),
    ('pattern "abc/messages/**" k 1', "k without mod"),
    ('pattern "abc/messages/**" colour 1', "no parameter"),
])
def test_bad_subscribe_parameters_are_errors_when_the_flow_is_built(tmp_path, args, says):
    from tests.routing.kit import World

    text = SUBSCRIBER.replace('pattern "abc/messages/**" estate "abc" %s', args)
    with pytest.raises((FlowErrors, ValueError), match=says):
        build(World(), text, tmp_path / "bad.flo")


@pytest.mark.parametrize("args, says", [
    ('name "abc/**/{id}"', "segment"),
    ('name "abc"', "segments"),
    ('name "abc/m/{id}" recipients "bob@"', "recipient"),
])
def test_bad_publish_parameters_are_errors_when_the_flow_is_built(tmp_path, args, says):
    from tests.routing.kit import World

    text = PUBLISHER.replace('name "abc/messages/alice/{id}" publisher "alice" recipients "bob@xyz"', args)
    with pytest.raises((FlowErrors, ValueError), match=says):
        build(World(), text, tmp_path / "bad.flo")


def test_a_house_without_cast_says_what_is_missing(tmp_path):
    from flowcast.runtime.scheduler import MicroThreadError
    from tests.routing.kit import World

    world = World()
    built, skedder, shim = build(world, SUBSCRIBER % "", tmp_path / "bob.flo")
    world.scheduler.spawn(skedder.run(world.scheduler, 1.0))
    with pytest.raises(MicroThreadError) as raised:
        world.run_for(2)
    assert "cast:" in str(raised.value.__cause__)
