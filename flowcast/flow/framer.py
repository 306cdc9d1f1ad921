"""Framers and frames at run time: Ioflo's hierarchical state machines.

A :class:`Framer` is a state machine whose states are :class:`Frame` s.
Frames nest (``frame child in parent``); the *outline* of a frame is the
chain from its top-most ancestor down through it to its primary unders,
and a framer is "in" every frame of its active outline at once.  Each tick
a running framer first *segues* (its auxiliaries' transitions, then its own
transitions, top frame first, so an outer frame's transition wins) and then
*recurs* (every active frame's recur acts, top down).

The control protocol -- ready, start, run, stop, abort -- and every
ordering detail (exit bottom-up, enter top-down, aux framers entered after
their frame's enter acts, elapsed and recurred reset on entry) follow
Ioflo 2.0.3 exactly, because the differential tests compare transition
traces with it.  Acts are plain callables compiled by the builder.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ABORT",
    "ABORTED",
    "Frame",
    "Framer",
    "READIED",
    "READY",
    "RUN",
    "RUNNING",
    "START",
    "STARTED",
    "STOP",
    "STOPPED",
    "Transition",
]

# Controls (what a framer is asked to do) and statuses (what it is).
READY, START, RUN, STOP, ABORT = "ready", "start", "run", "stop", "abort"
STOPPED, READIED, STARTED, RUNNING, ABORTED = "stopped", "readied", "started", "running", "aborted"

Act = Callable[[], Any]


@dataclass(frozen=True)
class Transition:
    """One change of a framer's active frame: what ``--trace`` prints."""

    time: float
    framer: str
    source: str  # leaf frame before, "-" at a (re)start
    target: str  # leaf frame after

    def __str__(self) -> str:
        return f"{self.time:g} {self.framer} {self.source} -> {self.target}"


class Frame:
    """One state of a framer, with its acts by context and its aux framers."""

    __slots__ = (
        "name",
        "framer",
        "over",
        "unders",
        "next",
        "outline",
        "beacts",
        "enacts",
        "renacts",
        "preacts",
        "reacts",
        "exacts",
        "rexacts",
        "auxes",
        "inode",
    )

    def __init__(self, name: str, framer: "Framer") -> None:
        self.name = name
        self.framer = framer
        self.over: Frame | None = None
        self.unders: list[Frame] = []
        self.next: Frame | None = None
        self.outline: list[Frame] = []
        self.beacts: list[Act] = []
        self.enacts: list[Act] = []
        self.renacts: list[Act] = []
        self.preacts: list[Act] = []
        self.reacts: list[Act] = []
        self.exacts: list[Act] = []
        self.rexacts: list[Act] = []
        self.auxes: list[Framer] = []
        self.inode: str = ""

    def trace_outline(self) -> list["Frame"]:
        """Ancestors top-down, this frame, then its chain of primary unders."""
        up: list[Frame] = []
        frame: Frame | None = self
        while frame is not None:
            up.append(frame)
            frame = frame.over
        up.reverse()
        frame = self.unders[0] if self.unders else None
        while frame is not None:
            up.append(frame)
            frame = frame.unders[0] if frame.unders else None
        self.outline = up
        return up

    # Text made on demand: only framers whose state a flow reads need it,
    # and making it for every frame of a large flow slowed the build.
    @property
    def head_human(self) -> str:
        """Ioflo's outline text cut at this frame, ``<top<me>``: while a conditional aux runs."""
        head = self.outline[: self.outline.index(self) + 1]
        return "<" + "<".join(f.name for f in head) + ">"

    @property
    def human(self) -> str:
        """Ioflo's outline text, ``<top<me>under>...``: what ``framer.F.state.human`` holds."""
        below = self.outline[self.outline.index(self) + 1 :]
        return self.head_human + ">".join(f.name for f in below)

    def check_enter(self, exits: list["Frame"]) -> bool:
        for need in self.beacts:
            if not need():
                return False
        for aux in self.auxes:
            # An aux still held by another frame that this transition does
            # not exit cannot be entered twice.
            if aux.main is not None and aux.main is not self and aux.main not in exits:
                return False
            if not aux.check_start():
                return False
        return True

    def enter(self) -> None:
        for act in self.enacts:
            act()
        for aux in self.auxes:
            aux.main = self
            aux.enter_all()

    def renter(self) -> None:
        for act in self.renacts:
            act()

    def recur(self) -> None:
        for act in self.reacts:
            act()
        for aux in self.auxes:
            aux.recur()

    def segue_auxes(self) -> None:
        for aux in self.auxes:
            aux.segue()

    def precur(self) -> bool:
        for act in self.preacts:
            if act():
                return True
        return False

    def exit(self) -> None:
        for aux in self.auxes:
            aux.exit_all()
            aux.main = None
        for act in self.exacts:
            act()

    def rexit(self) -> None:
        for act in self.rexacts:
            act()

    def __repr__(self) -> str:
        return f"<Frame {self.framer.name}.{self.name}>"


class Framer:
    """A hierarchical state machine driven by a skedder one tick at a time."""

    def __init__(
        self,
        name: str,
        *,
        schedule: str = "active",
        period: float = 0.0,
        stamp: Callable[[], float],
        on_transition: Callable[[Transition], None] | None = None,
    ) -> None:
        self.name = name
        self.schedule = schedule
        self.period = float(abs(period))
        self._stamp = stamp
        self.on_transition = on_transition
        self.frames: dict[str, Frame] = {}
        self.first: Frame | None = None
        self.active: Frame | None = None
        self.actives: list[Frame] = []
        self.main: Frame | None = None  # for an aux: the frame running it
        self.status = STOPPED
        self.desire = STOP
        self.done = True
        self.started_at = 0.0
        self.elapsed = 0.0
        self.recurred = 0
        self.inode: str = ""
        self._elapsed_share: Any = None
        self._recurred_share: Any = None
        self._active_share: Any = None
        self._human_share: Any = None

    # -- timers ------------------------------------------------------------

    def bind_state(self, elapsed: Any, recurred: Any) -> None:
        """Shares (``framer.NAME.state.elapsed`` / ``.recurred``) that mirror the timers."""
        self._elapsed_share = elapsed
        self._recurred_share = recurred

    def _restart_timer(self) -> None:
        self.started_at = self._stamp()
        self.elapsed = 0.0
        self.recurred = 0
        if self._elapsed_share is not None:
            self._elapsed_share.update(value=0.0)
            self._recurred_share.update(value=0)

    def _update_timer(self) -> None:
        self.elapsed = self._stamp() - self.started_at
        self.recurred += 1
        if self._elapsed_share is not None:
            self._elapsed_share.update(value=self.elapsed)
            self._recurred_share.update(value=self.recurred)

    def bind_outline(self, active: Any, human: Any) -> None:
        """Shares (``framer.NAME.state.active`` / ``.human``) that mirror the outline.

        As in Ioflo they change when a frame is activated (after a
        transition's enter acts) and when a conditional aux cuts or restores
        the outline, and keep their last value once the framer stops."""
        self._active_share = active
        self._human_share = human

    # -- outline bookkeeping ----------------------------------------------

    def _activate(self, frame: Frame) -> None:
        self.active = frame
        self.actives = frame.outline
        if self._active_share is not None:
            self._active_share.update(value=frame.name)
            self._human_share.update(value=frame.human)

    def change(self, actives: list[Frame], human: str) -> None:
        """Cut (a conditional aux runs) or restore the active outline."""
        self.actives = actives
        if self._human_share is not None:
            self._human_share.update(value=human)

    def _leaf(self) -> str:
        # The active frame's full outline: a conditional aux may have cut
        # ``actives`` short, but the framer is still "in" its leaf.
        return self.active.outline[-1].name if self.active is not None else "-"

    def _emit(self, source: str) -> None:
        if self.on_transition is not None:
            self.on_transition(Transition(round(self._stamp(), 6), self.name, source, self._leaf()))

    def check_start(self) -> bool:
        assert self.first is not None
        return self.check_enter(self.first.outline, [])

    def check_enter(self, enters: list[Frame], exits: list[Frame]) -> bool:
        if not enters:
            return False
        for frame in enters:
            if not frame.check_enter(exits):
                return False
        return True

    def enter_all(self) -> None:
        assert self.first is not None
        self.done = False
        self._activate(self.first)
        self._emit("-")
        self.enter(list(self.actives))

    def enter(self, enters: list[Frame]) -> None:
        if enters:
            self._restart_timer()
        for frame in enters:
            frame.enter()

    def recur(self) -> None:
        for frame in self.actives:
            frame.recur()

    def segue(self) -> bool:
        self._update_timer()
        # Auxes change state first, top down, so a higher frame's transition
        # this tick already sees what its auxes did.
        for frame in self.actives:
            frame.segue_auxes()
        for frame in self.actives:
            if frame.precur():
                return True
        return False

    def exit_all(self, abort: bool = False) -> None:
        exits = list(self.actives)
        exits.reverse()
        for frame in exits:
            frame.exit()
        self.active = None
        self.actives = []
        if not abort:
            self.done = True

    def transit(self, far: Frame, tracts: tuple[Act, ...] = ()) -> bool:
        """Move to ``far`` if every frame to be entered allows it (Ioflo's Transiter).

        ``tracts`` run once the move is certain, before any frame is exited:
        ``updated``/``changed`` conditions use them to mark what they saw.
        """
        nears = self.actives
        fars = far.outline
        exits: list[Frame]
        enters: list[Frame]
        common: list[Frame]
        for i in range(min(len(nears), len(fars))):
            if nears[i] is far or nears[i] is not fars[i]:
                exits, enters, common = nears[i:], fars[i:], nears[:i]
                break
        else:
            exits, enters, common = [], [], list(nears)
        if not self.check_enter(enters, exits):
            return False
        source = self._leaf()
        if self.on_transition is not None:
            self.on_transition(Transition(round(self._stamp(), 6), self.name, source, fars[-1].name))
        for act in tracts:  # what the transition's conditions mark as seen
            act()
        for frame in reversed(exits):
            frame.exit()
        for frame in reversed(common):
            frame.rexit()
        for frame in common:
            frame.renter()
        self.enter(enters)
        self._activate(far)
        return True

    # -- control protocol ---------------------------------------------------

    def control(self, control: str) -> str:
        """Apply one control; return the new status (Ioflo's runner.send)."""
        status = self.status
        if control == RUN:
            if status in (RUNNING, STARTED):
                self.segue()
                self.recur()
                self.status = RUNNING
            elif status in (STOPPED, READIED):
                self.desire = START
            else:
                self.desire = ABORT
                self.status = ABORTED
        elif control == READY:
            if status in (STOPPED, READIED):
                if self.check_start():
                    self.status = READIED
                else:
                    self.desire = STOP
                    self.status = STOPPED
            elif status not in (RUNNING, STARTED):
                self.desire = ABORT
                self.status = ABORTED
        elif control == START:
            if status in (STOPPED, READIED):
                if self.check_start():
                    self.desire = RUN
                    self.enter_all()
                    self.status = STARTED  # entered: an abort from here on exits
                    self.recur()
                else:
                    self.desire = STOP
                    self.status = STOPPED
            elif status in (RUNNING, STARTED):
                self.desire = RUN
            else:
                self.desire = ABORT
                self.status = ABORTED
        elif control == STOP:
            if status in (RUNNING, STARTED):
                self.desire = STOP
                self.exit_all(abort=True)
                self.status = STOPPED
            elif status not in (STOPPED, READIED):
                self.desire = ABORT
                self.status = ABORTED
        else:  # ABORT or anything unknown
            if status in (RUNNING, STARTED):
                self.exit_all()
            self.desire = ABORT
            self.status = ABORTED
        return self.status

    def __repr__(self) -> str:
        return f"<Framer {self.name} {self.status}>"
