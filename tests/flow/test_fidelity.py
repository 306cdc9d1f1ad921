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
