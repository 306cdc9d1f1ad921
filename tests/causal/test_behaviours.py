"""The stock behaviours ``causal publish`` and ``causal subscribe`` in real flows on the simulated network.

What a flow author relies on: items leave the source only into the relay,
acknowledgements and refusals come back to the flow, deliveries land once
and in causal order, a reply names what it answers, ``valid`` is predicate
2 by behaviour name (a typo is a load error), and a subscription lives
exactly as long as its frame.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flowcast.flow.errors import FlowErrors
from tests.cast.flowkit import Shim, build
from tests.causal.flowkit import FlowCausal
from tests.routing.kit import World

PREDICATES = '''
from flowcast.behaving import behaviour

@behaviour("log.valid")
def log_valid(io, msg):
    if b"boom" in msg.content:
        raise RuntimeError("the predicate has a bug")
    return b"spam" not in msg.content or "says spam"

@behaviour("log.class")
class LogClass:
    def __init__(self, io):
        pass
    def __call__(self):
        pass
'''

FLOW = """house {name}
load {predicates}
init ctl with held true
framer log be active first held
  frame held
    do queue to outbox at enter
    do queue to acks at enter
    do queue to got with bound 100000 at enter
    do causal publish from outbox to acks with topic "log"
    do causal subscribe to got with topic "log" {valid}
    go dropped if not held in ctl
  frame dropped
    go held if held in ctl
"""


def world(tmp_path: Path, valid: str = "", names=("alpha", "beta", "gamma"), **kw) -> FlowCausal:
    predicates = tmp_path / "predicates.py"
    predicates.write_text(PREDICATES)
    flows = {n: FLOW.format(name=n, predicates=predicates, valid=valid) for n in names}
    return FlowCausal(tmp_path, flows, **kw)


def got(w: FlowCausal, n: str) -> list[dict]:
    return list(w.store(n).queue("got").queue)


def test_published_items_are_acked_and_delivered_everywhere_once_and_a_reply_follows_what_it_answers(tmp_path):
    w = world(tmp_path)
    outbox = w.store("alpha").queue("outbox")
    for i in range(20):
        outbox.push(f"alpha says {i}")
    assert w.run_until(lambda: all(len(got(w, n)) == 20 for n in w.names), 60)
    acks = list(w.store("alpha").queue("acks").queue)
    assert [a["hash"] for a in acks] == [d["hash"] for d in got(w, "gamma")]  # acked in order, delivered in that order
    assert not outbox.queue
    answered = got(w, "beta")[3]
    w.store("beta").queue("outbox").push({"content": "beta answers 3", "deps": [answered], "tags": ["reply"]})
    assert w.run_until(lambda: all(len(got(w, n)) == 21 for n in w.names), 60)
    for n in w.names:
        deliveries = got(w, n)
        reply = deliveries[-1]
        assert reply["content"] == b"beta answers 3" and reply["tags"] == ["reply"]
        assert answered["hash"] in reply["deps"]
        order = [d["hash"] for d in deliveries]
        assert len(set(order)) == 21 and order.index(answered["hash"]) < order.index(reply["hash"])
        assert [d["content"] for d in deliveries[:20]] == [f"alpha says {i}".encode() for i in range(20)]


def test_valid_names_predicate_two_what_fails_it_is_reported_not_delivered_and_what_is_not_built_on_it_still_is(tmp_path):
    w = world(tmp_path, valid='valid "log valid"')
    outbox = w.store("beta").queue("outbox")
    for text in ("fine 1", "boom 2", "spam 3", "fine 4"):  # one chain: each names the one before
        outbox.push(text)
    rejected = w.store("gamma").share("causal.rejected")
    assert w.run_until(lambda: len(rejected.fields().get("log", {})) == 3 and all(len(got(w, n)) == 1 for n in w.names), 60)
    reasons = sorted(v["reason"] for v in rejected.fields()["log"].values())
    assert reasons == ["dep_rejected", "predicate_raised: RuntimeError: the predicate has a bug", "says spam"], reasons
    fine = got(w, "alpha")[0]
    assert fine["content"] == b"fine 1"
    w.store("alpha").queue("outbox").push({"content": "alpha agrees", "deps": [fine]})  # built on the valid message only
    assert w.run_until(lambda: all(len(got(w, n)) == 2 for n in w.names), 60)
    for n in w.names:
        assert [d["content"] for d in got(w, n)] == [b"fine 1", b"alpha agrees"]
    assert w.services["gamma"].ledger.evidence("log")  # kept as evidence, with the wire bytes


def test_a_dep_nobody_here_holds_comes_back_to_the_flow_with_the_item_once_the_wait_is_over(tmp_path):
    w = world(tmp_path, names=("alpha", "beta"), causal={"dep_wait": 3.0})
    outbox = w.store("alpha").queue("outbox")
    item = {"content": "orphan", "deps": ["ab" * 32]}
    outbox.push(item)
    outbox.push({"content": "bad dep", "deps": ["not hex"]})
    errors = w.store("alpha").queue("outbox.error")
    start = w.world.scheduler.clock.now()
    assert w.run_until(lambda: len(errors.queue) == 1, 1)  # a malformed dep at once...
    assert errors.queue[0]["reason"] == "bad_dep"
    assert not w.run_until(lambda: len(errors.queue) == 2, 2.9)  # ...an unknown one not before the wait
    assert w.run_until(lambda: len(errors.queue) == 2, 1)
    assert 3.0 <= w.world.scheduler.clock.now() - start <= 3.3
    late = errors.queue[1]
    assert late["reason"] == "unknown_dep" and late["data"] == item and "after waiting 3 s" in late["message"]
    assert not got(w, "alpha") and not outbox.queue
    assert w.services["alpha"].waits.waiting == 0 and w.services["alpha"].waits.bytes == 0


def test_a_publish_naming_a_dep_its_relay_is_still_storing_waits_for_it_then_goes(tmp_path):
    """The application got the message (say by CAST) before its relay stored it: the reply waits, not refused."""
    w = world(tmp_path, names=("alpha", "beta"))
    first = w.services["beta"].publish("log", b"question")
    alpha = w.services["alpha"]
    assert alpha.held_id("log", first.msg.hash) is None  # signed at beta; alpha's relay has not got it yet
    w.store("alpha").queue("outbox").push({"content": "answer", "deps": [first.msg.hash.hex()]})
    acks = w.store("alpha").queue("acks")
    assert w.run_until(lambda: len(acks.queue) == 1, 10), w.store("alpha").queue("outbox.error").queue
    assert first.msg.hash.hex() in acks.queue[0]["deps"]
    assert alpha.waits.counts["waited"] == 1 and alpha.waits.counts["went"] == 1 and alpha.waits.waiting == 0
    assert w.run_until(lambda: [m["content"] for m in got(w, "beta")] == [b"question", b"answer"], 10)  # in causal order


def test_waiting_publishes_are_bounded_and_wait_0_refuses_at_once(tmp_path):
    w = world(tmp_path, names=("alpha", "beta"))
    alpha = w.services["alpha"]
    alpha.waits.limit = 2
    outbox, errors = w.store("alpha").queue("outbox"), w.store("alpha").queue("outbox.error")
    for i in range(3):
        outbox.push({"content": f"orphan {i}", "deps": [bytes([i]) * 32]})
    assert w.run_until(lambda: len(errors.queue) == 1, 1)  # the third: refused at once, the wait is full
    assert errors.queue[0]["reason"] == "unknown_dep" and "already wait" in errors.queue[0]["message"]
    assert alpha.waits.waiting == 2 and alpha.waits.counts["refused_full"] == 1
    with pytest.raises(Exception, match="unknown_dep|holds no message"):
        alpha.publish_waiting("log", b"now or never", deps=[b"\x09" * 32], wait=0)


def test_an_estate_without_a_key_for_the_topic_gets_its_items_back(tmp_path):
    w = world(tmp_path, names=("alpha", "beta"), publishers=("alpha",))
    w.store("beta").queue("outbox").push("not mine to say")
    errors = w.store("beta").queue("outbox.error")
    assert w.run_until(lambda: len(errors.queue) == 1, 10)
    assert errors.queue[0]["reason"] == "no_key" and errors.queue[0]["data"] == "not mine to say"


def test_the_subscription_lives_with_its_frame_and_resumes_without_duplicates(tmp_path):
    w = world(tmp_path, names=("alpha", "beta"))
    service = w.services["beta"]
    assert w.run_until(lambda: len(service.broker.subs) == 1, 10)
    w.store("beta").share("ctl")["held"] = False
    assert w.run_until(lambda: not service.broker.subs, 10)
    outbox = w.store("alpha").queue("outbox")
    for i in range(5):
        outbox.push(f"while away {i}")
    assert w.run_until(lambda: len(w.store("alpha").queue("acks").queue) == 5, 30)
    assert w.run_until(lambda: sum(1 for h in service.relay.index.values()) == 5, 30)
    assert not got(w, "beta")  # nobody subscribed: held in Local Storage, not pushed
    w.store("beta").share("ctl")["held"] = True
    assert w.run_until(lambda: len(got(w, "beta")) == 5, 30)
    w.run_until(lambda: False, 2)  # anything pushed twice would land now
    assert [d["content"] for d in got(w, "beta")] == [f"while away {i}".encode() for i in range(5)]


YAML_FLOW = """house: alpha
framers:
- framer: log
  be: active
  frames:
  - frame: run
    acts:
    - {do: queue, to: outbox, at: enter}
    - {do: queue, to: got, at: enter}
    - do: causal publish
      with: {topic: log, tags: "note yaml"}
      from: outbox
    - do: causal subscribe
      with: {topic: log}
      to: got
"""


def test_the_behaviours_in_a_yaml_flow(tmp_path):
    w = FlowCausal(tmp_path, {"alpha": YAML_FLOW, "beta": YAML_FLOW.replace("house: alpha", "house: beta")})
    w.store("alpha").queue("outbox").push(b"\x00raw bytes")
    assert w.run_until(lambda: len(got(w, "beta")) == 1, 30)
    assert got(w, "beta")[0]["content"] == b"\x00raw bytes" and got(w, "beta")[0]["tags"] == ["note", "yaml"]


@pytest.mark.parametrize("act, says", [
    ('do causal subscribe to got with topic "log" valid "log valit"', "did you mean 'log.valid'"),
    ('do causal subscribe to got with topic "log" valid "log class"', "must be a function behaviour taking (io, msg)"),
    ('do causal subscribe with topic "log"', "causal subscribe needs a queue share"),
    ('do causal subscribe to got with topic "bad topic"', "a topic is 1 to 8 segments"),
    ('do causal publish to acks with topic "log"', "causal publish needs a share to publish"),
    ('do causal publish from outbox with topic "log" tags "no way"', ""),
    ('do causal publish from outbox with topic "log" tags "b@d"', "a tag is 1 to 64"),
])
def test_mistakes_are_load_errors_at_the_act(tmp_path, act, says):
    predicates = tmp_path / "predicates.py"
    predicates.write_text(PREDICATES)
    text = f"house alpha\nload {predicates}\nframer log be active first run\n  frame run\n    do queue to outbox at enter\n    {act}\n"
    if not says:  # two plain tags load fine
        build(World(seed=1), text, tmp_path / "alpha.flo")
        return
    with pytest.raises(FlowErrors) as raised:
        build(World(seed=1), text, tmp_path / "alpha.flo")
    assert says in str(raised.value) and "alpha.flo:6" in str(raised.value)


def test_without_a_relay_in_the_house_the_flow_is_told_where_it_lives(tmp_path):
    text = 'house alpha\nframer log be active first run\n  frame run\n    do causal subscribe to got with topic "log"\n'
    w = World(seed=1)
    built, skedder, shim = build(w, text, tmp_path / "alpha.flo")
    assert isinstance(shim, Shim) and shim.causal is None
    w.scheduler.spawn(skedder.run(w.scheduler), name="skedder")
    with pytest.raises(Exception, match="runs in the house that holds the CAST cache"):
        w.run_until(lambda: False, 1)


def test_the_behaviours_wait_overrides_the_estates_dep_wait(tmp_path):
    predicates = tmp_path / "predicates.py"
    predicates.write_text(PREDICATES)
    flow = FLOW.replace('with topic "log"\n', 'with topic "log" wait 0.5\n', 1)
    assert 'wait 0.5' in flow
    w = FlowCausal(tmp_path, {n: flow.format(name=n, predicates=predicates, valid="") for n in ("alpha", "beta")})
    errors = w.store("alpha").queue("outbox.error")
    w.store("alpha").queue("outbox").push({"content": "orphan", "deps": ["cd" * 32]})
    start = w.world.scheduler.clock.now()
    assert w.run_until(lambda: len(errors.queue) == 1, 2)  # not the estate's 5 s
    assert 0.5 <= w.world.scheduler.clock.now() - start <= 0.7 and errors.queue[0]["reason"] == "unknown_dep"
