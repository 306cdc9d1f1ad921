"""Ioflo semantics the differential corpus shows only by their effect on a trace.

Here the values themselves are checked: what a failed ``inc`` leaves in the
store and says in the log, and what the framer-state shares hold.
"""

from __future__ import annotations

import logging

from flowcast.behaving import Registry
from flowcast.flow.builder import build_house
from flowcast.flow.floscript import parse_flo
from flowcast.flow.skedder import Skedder, Stamp
from flowcast.runtime import Scheduler, VirtualClock


def run(text: str, until: float = 1.0, period: float = 0.125):
    trace, printed = [], []
    stamp = Stamp()
    built = build_house(parse_flo(text, "t.flo").house(), stamp=stamp, on_transition=trace.append,
                        out=printed.append, registry=Registry())
    skedder = Skedder(built.taskables, period, stamp)
    scheduler = Scheduler(VirtualClock())
    scheduler.spawn(skedder.run(scheduler, until))
    scheduler.run()
    return [(t.time, t.framer, t.source, t.target) for t in trace], printed, built


INCS = """house h
init .seeded with value 1
init .step with value 2
framer f be active first a
  frame a
    recur
    inc .count with 1
    inc .seeded with 2
    inc .total from .step
    inc .seeded from .step
"""


def test_inc_of_a_never_initialised_field_fails_and_leaves_none(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="flowcast.flow"):
        _, _, built = run(INCS, until=0.9)
    store = built.store
    count, total, seeded = store.share("count"), store.share("total"), store.share("seeded")
    assert count.value is None and count.stamp is None  # never counted, never stamped
    assert total.value is None and total.stamp is None
    ticks = 8  # recur at 0.0 (start) and 0.125 ... 0.875
    assert seeded.value == 1 + ticks * (2 + 2)  # an initialised field counts as before
    acts = built.framers["f"].frames["a"].reacts
    assert [act.failures for act in acts] == [ticks, 0, ticks, 0]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2, warnings  # once per failing act, not once per tick
    assert warnings[0].startswith("t.flo:7:5: inc count failed")


STATES = """house h
framer f be active first a
  frame top
    frame a in top
      go b
    frame b in top
      frame c in b
      go d
  frame d
    bid stop me
framer g be active first x
  frame x
    go y if framer.f.state.active == "d"
  frame y
"""


def test_framer_outline_shares_mirror_ioflo_and_keep_their_last_value() -> None:
    trace, _, built = run(STATES, until=1.0)
    assert ("f", "c", "d") in [(f, s, t) for _t, f, s, t in trace]  # leaves: b is entered at c
    active, human = built.store.share("framer.f.state.active"), built.store.share("framer.f.state.human")
    assert (active.value, human.value) == ("d", "<d>")  # f stopped in d: Ioflo leaves the last values
    # nothing names g's outline: its shares are not kept up every transition for nobody
    assert "framer.g.state.active" not in built.store and "framer.g.state.human" not in built.store


def test_frame_human_is_ioflo_outline_text() -> None:
    _, _, built = run(STATES, until=0.1)
    frames = built.framers["f"].frames
    assert [frames[n].human for n in ("top", "a", "b", "c", "d")] == [
        "<top>a", "<top<a>", "<top<b>c", "<top<b<c>", "<d>"]
    assert frames["b"].head_human == "<top<b>"
