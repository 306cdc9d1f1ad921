"""flowcast's frame-transition trace equals Ioflo 2.0.3's for every corpus script.

Each script in ``tests/flow/corpus`` is run twice: by Ioflo (through the
oracle, in simulated time) and by ``flowcast.house.trace.run_trace`` on the
virtual clock, with the same period and horizon from the script's header.
The traces -- (time, framer, from frame, to frame), in order -- must be
equal.  A script marked ``# differs:`` documents a deliberate departure from
Ioflo; there flowcast must produce the trace in the script's ``.expected``
file instead (``test_oracle`` checks Ioflo really does something else).
What ``print`` acts printed is compared too, in order: it is the only way
to see print (and the order of the contexts it runs in) from outside.

A missing or broken flowcast API is a failure here, never a skip.
"""

from __future__ import annotations

import importlib
from typing import Iterable

import pytest

from flowcast.behaving.registry import Registry

from tests.differential.corpus import CorpusScript, corpus, parse_trace_lines

Row = tuple[float, str, str, str]

SCRIPTS = corpus()


def rows(trace: Iterable[object]) -> list[Row]:
    """Normalise either side's transitions to comparable tuples (time to 6 decimals)."""
    out = []
    for t in trace:
        out.append((round(float(t.time), 6), str(t.framer), str(t.source), str(t.target)))  # type: ignore[attr-defined]
    return out


def explain(expected: list[Row], actual: list[Row], context: int = 3, reference: str = "ioflo") -> str:
    """Say where two traces part, with a few lines either side, for a readable failure."""
    n = next((i for i, (a, b) in enumerate(zip(expected, actual)) if a != b), min(len(expected), len(actual)))
    lo = max(0, n - context)

    def show(trace: list[Row]) -> str:
        lines = [f"  {'>' if i == n else ' '} {t:g} {f} {s} -> {d}"
                 for i, (t, f, s, d) in enumerate(trace[lo:n + context + 1], start=lo)]
        return "\n".join(lines) or "  (nothing)"

    return (f"traces differ at transition #{n} ({reference} {len(expected)}, flowcast {len(actual)} transitions)\n"
            f"{reference}:\n{show(expected)}\nflowcast:\n{show(actual)}")


_RUNS: dict[str, tuple[list[Row], list[str]]] = {}


def flowcast_run(script: CorpusScript) -> tuple[list[Row], list[str]]:
    """flowcast's trace and printed lines for ``script`` (memoised: each script is built once)."""
    key = str(script.path)
    if key not in _RUNS:
        from flowcast.house.trace import run_trace  # imported here: a missing API fails each test

        printed: list[str] = []
        trace = run_trace(script.path, period=script.period, until=script.until,
                          registry=_registry(script.behaviors), out=printed.append)
        _RUNS[key] = (rows(trace), printed)
    return _RUNS[key]


def _registry(modules: tuple[str, ...]) -> Registry | None:
    """The header's behaviour modules plus the stock ones.

    A shared script cannot ``load`` them: Ioflo's ``load`` reads another
    .flo file.  So the test hands run_trace a registry that has them.
    """
    if not modules:
        return None
    registry = Registry()
    registry.load_entry_points()
    for name in modules:
        registry.add_module(importlib.import_module(name))
    return registry


@pytest.mark.parametrize("script", [s for s in SCRIPTS if not s.differs],
                         ids=[s.name for s in SCRIPTS if not s.differs])
def test_flowcast_trace_equals_ioflo(script: CorpusScript, oracle) -> None:
    expected = rows(oracle(script).trace)
    actual, _printed = flowcast_run(script)
    assert actual == expected, explain(expected, actual)


@pytest.mark.parametrize("script", [s for s in SCRIPTS if not s.differs],
                         ids=[s.name for s in SCRIPTS if not s.differs])
def test_flowcast_prints_equal_ioflo(script: CorpusScript, oracle) -> None:
    """`print` leaves no mark in the trace, so compare what both runtimes printed, in order."""
    _trace, printed = flowcast_run(script)
    assert printed == [message for _stamp, message in oracle(script).prints]


def test_documented_differences() -> None:
    """For ``# differs:`` scripts flowcast produces the documented trace, not Ioflo's."""
    for script in (s for s in SCRIPTS if s.differs):
        expected = parse_trace_lines(script.expected_path.read_text())
        actual, _printed = flowcast_run(script)
        assert actual == expected, f"{script.name} ({script.differs}):\n" + explain(expected, actual, reference="expected")


def test_transition_type_is_the_shared_contract() -> None:
    """flowcast's Transition has the contract's fields in the contract's order."""
    from flowcast.house.trace import Transition

    t = Transition(0.25, "f", "-", "one")
    assert (t.time, t.framer, t.source, t.target) == (0.25, "f", "-", "one")
