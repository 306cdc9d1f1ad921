"""Run a FloScript under Ioflo 2.0.3 and return its frame-transition trace.

This is the reference side of the differential suite: whatever Ioflo does
with a ``.flo`` script and a skedder period is, by definition, the behaviour
flowcast must reproduce.  To stay faithful we do not re-interpret Ioflo's
semantics here at all:

* the houses are built by Ioflo's own ``Skedder.build()``;
* the run loop is a copy of ``Skedder.run()`` (simulated time) with one
  change only -- it stops after the tick whose stamp reaches ``until``
  (inclusive) instead of running until every tasker has stopped;
* transitions are taken from the very messages Ioflo itself prints
  (``To: FRAMER<OUTLINE at T ...``), captured by replacing the ``write``
  method of Ioflo's console singleton for the duration of the run.  The
  message tells us *that* a transition happened and when; the live framer
  objects, read at the moment of printing (before the transition is carried
  out), tell us the active leaf frame it left.

Three message shapes exist in Ioflo 2.0.3 and all become a
:class:`Transition`:

* ``To: F<<first>... at T`` (``Framer.makeRunner`` on START, ``Frame.enter``
  for an aux): a first entry, source ``-``;
* ``To: F<far-outline at T Via: NEAR (human) From: ... after DT``
  (``Transiter.action``): a transition of framer ``F``;
* ``To: AUX in F<head> at T Via: ...`` (``Suspender.action``, a conditional
  aux): the first entry of ``AUX``.

Nothing from Ioflo is imported into flowcast: this module lives in the tests.
"""

from __future__ import annotations

import collections.abc  # noqa: F401  -- ioflo 2.0.3 needs it imported first on 3.11
import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, NamedTuple

from ioflo.aid.consoling import getConsole
from ioflo.base import skedding
from ioflo.base.globaling import ABORT, ABORTED, RUNNING, STARTED

__all__ = ["Transition", "OracleRun", "OracleError", "ioflo_run", "ioflo_trace", "leaf_of"]


class Transition(NamedTuple):
    """One frame transition, the shared trace contract (time, framer, source, target)."""

    time: float
    framer: str
    source: str
    target: str

    def __str__(self) -> str:  # same line format as ``flowcast run --trace``
        return f"{self.time:g} {self.framer} {self.source} -> {self.target}"


class OracleError(RuntimeError):
    """Ioflo could not build or run the script; carries Ioflo's own console output."""


@dataclass
class OracleRun:
    """Everything one bounded Ioflo run produced that the tests look at."""

    trace: list[Transition] = field(default_factory=list)
    prints: list[tuple[float, str]] = field(default_factory=list)  # (stamp, message) of ``print``
    ticks: int = 0  # skedder iterations actually run
    stopped_early: bool = False  # Ioflo shut down (no ready/running taskers) before ``until``
    console: str = ""  # Ioflo's terse console output, for diagnostics
    stores: dict[str, Any] = field(default_factory=dict)  # house name -> ioflo Store, after the run


# "To: F<...": the name ends at the first '<'; F is an identifier (clones: a_b).
_TRANSIT = re.compile(r"^To: (?P<framer>\w+)<(?P<human>\S*) at (?P<t>\S+) Via: ")
_SUSPEND = re.compile(r"^To: (?P<aux>\w+) in (?P<framer>\w+)<(?P<human>\S*) at (?P<t>\S+) Via: ")
_ENTER = re.compile(r"^To: (?P<framer>\w+)<(?P<human>\S*) at (?P<t>\S+)\n?$")
_PRINT = re.compile(r"^\*\*\* (?P<msg>.*) \*\*\*\n?$", re.S)


def leaf_of(frame: Any) -> str:
    """Name of the bottom frame of ``frame``'s outline (follows primary unders)."""
    return frame.outline[-1].name if frame.outline else frame.name


def _human_leaf(human: str) -> str:
    """Leaf name from an Ioflo outline string such as ``<top<mid>leaf``."""
    names = [n for n in re.split(r"[<>]", human) if n]
    if not names:
        raise OracleError(f"cannot read an outline from {human!r}")
    return names[-1]


class _Capture:
    """Console ``write`` replacement: keeps terse output, turns ``To:`` lines into transitions."""

    def __init__(self, console: Any) -> None:
        self._console = console
        self.framers: dict[str, Any] = {}
        self.run = OracleRun()
        self.lines: list[str] = []
        self.stamp = 0.0

    def write(self, msg: str, verbosity: int | None = None) -> None:
        if verbosity is not None and verbosity > self._console.Wordage.terse:
            return  # concise/verbose/profuse chatter: dropped, as at ioflo -v terse
        self.lines.append(msg)
        if msg.startswith("To: "):
            self.run.trace.append(self._transition(msg))
        elif msg.startswith("*** "):
            m = _PRINT.match(msg)
            if m:
                self.run.prints.append((round(self.stamp, 6), m.group("msg")))

    def _framer(self, name: str) -> Any:
        try:
            return self.framers[name]
        except KeyError:
            raise OracleError(f"transition names unknown framer {name!r}") from None

    def _transition(self, msg: str) -> Transition:
        m = _SUSPEND.match(msg)
        if m:  # conditional aux entered: a first entry of the aux
            aux = self._framer(m.group("aux"))
            return Transition(float(m.group("t")), aux.name, "-", leaf_of(aux.first))
        m = _TRANSIT.match(msg)
        if m:  # printed before exits/enters run: the framer still shows its source
            framer = self._framer(m.group("framer"))
            source = leaf_of(framer.active) if framer.active is not None else "-"
            return Transition(float(m.group("t")), framer.name, source, _human_leaf(m.group("human")))
        m = _ENTER.match(msg)
        if m:  # start of a framer or entry of an aux: printed before enterAll()
            framer = self._framer(m.group("framer"))
            source = leaf_of(framer.active) if framer.active is not None else "-"
            return Transition(float(m.group("t")), framer.name, source, _human_leaf(m.group("human")))
        raise OracleError(f"unrecognised Ioflo transition message: {msg!r}")


def _step(skedder: skedding.Skedder, ready: Any, aborted: Any, stamp: float) -> bool:
    """One iteration of ``Skedder.run``'s loop body at ``stamp``; True if any tasker is live."""
    more = False
    for _ in range(len(ready)):
        tasker, retime, period = ready.popleft()
        if retime > stamp:  # not time yet
            ready.append((tasker, retime, period))
            status = tasker.status
        else:
            try:
                status = tasker.runner.send(tasker.desire)
                if status == ABORTED:
                    aborted.append((tasker, stamp, period))
                else:  # append allows for a period change (bid ... at P)
                    ready.append((tasker, retime + tasker.period, tasker.period))
            except StopIteration:  # (Ioflo reuses the previous tasker's status here; framers never stop iterating)
                aborted.append((tasker, stamp, period))
                status = ABORTED
        if status == RUNNING or status == STARTED:
            more = True
    return more


def ioflo_run(path: str | os.PathLike[str], period: float, until: float,
              behaviors: Iterable[str] = ()) -> OracleRun:
    """Build ``path`` with Ioflo and run it in simulated time for ticks 0, P, 2P, ... <= ``until``.

    ``behaviors`` are module names Ioflo imports before building (its ``-b``
    option), for scripts that ``do`` behaviours registered by a test module.
    """
    if period <= 0:
        raise ValueError("period must be positive")
    console = getConsole()
    capture = _Capture(console)
    saved_write, saved_verbosity = console.__dict__.get("write"), console._verbosity
    console.write = capture.write  # instance attribute shadows Console.write
    console._verbosity = console.Wordage.terse
    try:
        skedder = skedding.Skedder(name="oracle", period=period, real=False,
                                   filepath=os.fspath(path), behaviors=list(behaviors))
        try:
            built = skedder.build()
        except Exception as error:  # ioflo's parser raises, and has bugs that raise others
            raise OracleError(f"ioflo failed to build {path}: {error!r}\n{''.join(capture.lines)}") from error
        if not built:
            raise OracleError(f"ioflo failed to build {path}:\n{''.join(capture.lines)}")
        for house in skedder.houses:
            for framer in house.framers:
                if framer.name in capture.framers and capture.framers[framer.name] is not framer:
                    raise OracleError(f"framer name {framer.name!r} is used by two houses")
                capture.framers[framer.name] = framer
        capture.run.stores = {house.name: house.store for house in skedder.houses}
        _run_bounded(skedder, capture, until)
    finally:
        if saved_write is None:
            del console.write
        else:
            console.write = saved_write
        console._verbosity = saved_verbosity
    capture.run.console = "".join(capture.lines)
    return capture.run


def _run_bounded(skedder: skedding.Skedder, capture: _Capture, until: float) -> None:
    """``Skedder.run`` for simulated time, cut at ``until``, then its abort-all cleanup."""
    stamp = skedder.stamp
    for house in skedder.houses:
        house.store.changeStamp(stamp)
        for tasker in house.taskables:
            skedder.addReadyTask(tasker)
    ready, aborted = skedder.ready, skedder.aborted
    limit = until + skedder.period * 1e-6  # the stamp accumulates float error like Ioflo's
    try:
        while stamp <= limit:
            capture.stamp = stamp
            more = _step(skedder, ready, aborted, stamp)
            capture.run.ticks += 1
            if not ready or not more:  # Ioflo shuts the skedder down here
                capture.run.stopped_early = True
                break
            skedder.stamp += skedder.period
            stamp = skedder.stamp
            for house in skedder.houses:
                house.store.changeStamp(stamp)
    finally:  # as Skedder.run's finally: abort what is still ready (runs exit contexts)
        for _ in range(len(ready)):
            tasker, _retime, _period = ready.popleft()
            try:
                tasker.runner.send(ABORT)
            except StopIteration:
                pass


def ioflo_trace(path: str | os.PathLike[str], period: float, until: float,
                behaviors: Iterable[str] = ()) -> list[Transition]:
    """The frame-transition trace Ioflo 2.0.3 produces for ``path`` (see :func:`ioflo_run`)."""
    return ioflo_run(path, period, until, behaviors).trace


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.differential.ioflo_oracle FILE [--period P] [--until U]``: print Ioflo's trace.

    Period and horizon default to the script's ``# differential:`` header, so
    a corpus script's reference trace is one command away when debugging.
    """
    import argparse
    from pathlib import Path

    from tests.differential.corpus import parse_header

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("file", type=Path)
    parser.add_argument("--period", type=float)
    parser.add_argument("--until", type=float)
    parser.add_argument("--prints", action="store_true", help="also show what print acts printed")
    args = parser.parse_args(argv)
    header = parse_header(args.file) if args.period is None or args.until is None else None
    period = args.period if args.period is not None else header.period  # type: ignore[union-attr]
    until = args.until if args.until is not None else header.until  # type: ignore[union-attr]
    run = ioflo_run(args.file, period, until, header.behaviors if header else ())
    for t in run.trace:
        print(t)
    if args.prints:
        for stamp, message in run.prints:
            print(f"# {stamp:g} print {message}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
