"""Ioflo's own example plans, run from the installed package, trace for trace.

The corpus holds copies made to measure; these are Ioflo's files as shipped,
so a plan that flowcast claims to run is checked against the very script
Ioflo's authors wrote to test the feature.
"""

from __future__ import annotations

import collections.abc  # noqa: F401  -- must precede any ioflo import on 3.11
from pathlib import Path

import ioflo
import pytest

from flowcast.house.trace import run_trace
from tests.differential.ioflo_oracle import ioflo_run
from tests.differential.test_differential import explain, rows

PLANS = Path(ioflo.__file__).resolve().parent / "app" / "plan"


@pytest.mark.parametrize("name, period, until", [("testActorRelative", 0.125, 1.0)])
def test_plan_trace_equals_ioflo(name: str, period: float, until: float) -> None:
    path = PLANS / f"{name}.flo"
    expected = rows(ioflo_run(path, period, until).trace)
    printed: list[str] = []
    actual = rows(run_trace(path, period=period, until=until, out=printed.append))
    assert actual == expected, explain(expected, actual)
    assert printed[-1] == '"Success"'


def test_actor_relative_reaches_done_by_half_a_second() -> None:
    """The issue's own yardstick: test0 -> ... -> done by 0.5 s, as in Ioflo."""
    actual = rows(run_trace(PLANS / "testActorRelative.flo", period=0.125, until=1.0, out=lambda _: None))
    assert [(t, target) for t, _f, _s, target in actual] == [
        (0.0, "test0"), (0.125, "test1"), (0.25, "test2"), (0.375, "test3"), (0.5, "done")]
