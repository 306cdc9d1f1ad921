"""Whole-flow name checks, shared by both front ends.

A ``go`` may name a frame written further down, a ``bid`` a framer defined
later, so these checks run once the whole flow is read.  They report every
problem found, each located and with a "did you mean" where a close name
exists; the caller raises them together.  Behaviour and share names are not
checked here: only the builder knows which behaviours and shares exist.

One fix-up happens here too, because it needs every frame: ``under NAME``
makes the named frame's ``over`` the frame that named it.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from flowcast.flow.errors import FlowError, did_you_mean
from flowcast.flow.spec import FlowSpec, FramerSpec, FrameSpec, HouseSpec, Need, Where
from flowcast.flow.verbs import ACTS, AUX, FRAME, NEEDS, TASKERS_OR_ALL


def locate(where: Where | None, word: str) -> Where | None:
    """The position of ``word`` on ``where``'s line at or after its column.

    Acts keep the position of their statement; an error about one name in
    the statement should point at that name, not at the verb.
    """
    if where is None or not where.text or not word:
        return where
    pattern = re.compile(rf"(?<![\w.]){re.escape(word)}(?![\w])")
    m = pattern.search(where.text, max(0, where.col - 1))
    if m is None:
        return where
    return Where(where.file, where.line, m.start() + 1, where.text)


#: Where a name attribute was written, for attributes whose object's own
#: ``where`` is elsewhere (``first X`` on its own line): ``(id(obj), attr)``.
#: A value may also be a function giving the Where: positions are needed
#: only for errors, so a front end may leave building them until then.
Positions = dict[tuple[int, str], "Where | Callable[[], Where]"]


class _Checker:
    def __init__(self, positions: Positions | None) -> None:
        self.errors: list[FlowError] = []
        self.positions = positions or {}
        self.framers: dict[str, FramerSpec] = {}
        self.aux_names: list[str] = []

    def at(self, obj: object, attr: str, fallback: Where | None) -> Where | None:
        where = self.positions.get((id(obj), attr), fallback)
        return where() if callable(where) else where

    def error(self, message: str, where: Where | None, word: str = "", hint: str = "") -> None:
        self.errors.append(FlowError(message, locate(where, word) if word else where, hint))

    def name(self, kind: str, name: str, known: Collection[str], where: Where | None, extra: str = "") -> bool:
        if name in known:
            return True
        hint = did_you_mean(name, list(known))
        if not hint and extra:
            hint = extra
        self.error(f"unknown {kind} {name!r}", where, name, hint)
        return False

    # -- walk ------------------------------------------------------------------

    def house(self, house: HouseSpec) -> None:
        seen: set[str] = set()
        for framer in house.framers:
            if framer.name in seen:
                self.error(f"framer {framer.name!r} defined twice in house {house.name!r}", framer.where)
            seen.add(framer.name)
        self.framers = {f.name: f for f in house.framers}
        self.aux_names = [f.name for f in house.framers if f.schedule == "aux"]
        for framer in house.framers:
            self.framer(house, framer)

    def framer(self, house: HouseSpec, framer: FramerSpec) -> None:
        frames = {f.name: f for f in framer.frames}
        if len(frames) != len(framer.frames):
            seen: set[str] = set()
            for f in framer.frames:
                if f.name in seen:
                    self.error(f"frame {f.name!r} defined twice in framer {framer.name!r}", f.where)
                seen.add(f.name)
        if not framer.frames:
            self.error(f"framer {framer.name!r} has no frames", framer.where, hint="add 'frame NAME' after it")
        # Positions are looked up only for a name that is unknown: the common case is cheap.
        if framer.first is not None and framer.first not in frames:
            self.name("first frame", framer.first, frames, self.at(framer, "first", framer.where))
        nested = False
        for frame in framer.frames:
            if frame.over is not None:
                nested = True
                if frame.over not in frames:
                    self.name("over frame", frame.over, frames, self.at(frame, "over", frame.where))
            if frame.next is not None and frame.next not in frames:
                self.name("next frame", frame.next, frames, self.at(frame, "next", frame.where))
        for frame in framer.frames:
            if frame.under is None:
                continue
            nested = True
            where = self.at(frame, "under", frame.where)
            if self.name("under frame", frame.under, frames, where):
                under = frames[frame.under]
                if under.over is None:
                    under.over = frame.name
                elif under.over != frame.name:
                    self.error(f"frame {under.name!r} is in {under.over!r}, so it cannot be under {frame.name!r}",
                               where, frame.under)
        if nested:  # without over or under frames there is no loop to find
            self.cycles(framer, frames)
        for i, frame in enumerate(framer.frames):
            has_next = frame.next is not None or i + 1 < len(framer.frames)
            self.frame(house, framer, frame, frames, has_next)

    def cycles(self, framer: FramerSpec, frames: dict[str, FrameSpec]) -> None:
        done: set[str] = set()
        for start in framer.frames:
            path: list[str] = []
            on_path: set[str] = set()
            name: str | None = start.name
            while name is not None and name in frames and name not in done:
                if name in on_path:
                    loop = path[path.index(name):] + [name]
                    self.error(f"frames nest in a loop: {' in '.join(loop)}", frames[name].where)
                    break
                on_path.add(name)
                path.append(name)
                name = frames[name].over
            done.update(path)

    def frame(self, house: HouseSpec, framer: FramerSpec, frame: FrameSpec,
              frames: dict[str, FrameSpec], has_next: bool) -> None:
        framers = self.framers
        for act in frame.acts:
            verb = ACTS.get(act.verb)
            for key, kind in verb.names if verb is not None else ():
                value = act.args.get(key)
                if kind == FRAME:
                    if value == "next":
                        if not has_next:
                            self.error(f"'go next' from {frame.name!r}, the last frame of framer {framer.name!r}",
                                       act.where, hint="add 'next NAME' to this frame or name the target frame")
                    elif value != "me" and isinstance(value, str):
                        self.name("frame", value, frames, act.where, "targets are a frame name, next or me")
                elif kind == AUX:
                    self.aux(value or "", act.where, framers)
                elif kind == NEEDS:
                    for need in value or []:
                        self.need(house, framer, need, framers)
                else:  # TASKERS or TASKERS_OR_ALL
                    special = ("me", "all") if kind == TASKERS_OR_ALL else ("me",)
                    for t in value or []:
                        if t not in special:
                            self.name("tasker", t, framers, act.where)
        for aux in frame.auxes:
            self.aux(aux.framer, aux.where, framers)
            for need in aux.needs:
                self.need(house, framer, need, framers)

    def aux(self, name: str, where: Where | None, framers: dict[str, FramerSpec]) -> None:
        if self.name("aux framer", name, framers, where):
            if framers[name].schedule != "aux":
                self.error(f"framer {name!r} is used as an aux but is not 'be aux'", where,
                           hint=f"declare it 'framer {name} be aux'")

    def need(self, house: HouseSpec, framer: FramerSpec, need: Need, framers: dict[str, FramerSpec]) -> None:
        if need.kind in ("done", "status") and need.tasker not in (None, "me"):
            self.name("tasker", need.tasker, framers, need.where)
        if need.kind == "done" and need.aux not in (None, "any", "all"):
            self.name("aux framer", need.aux, self.aux_names, need.where)
        owner = framer
        if need.framer not in (None, "me"):
            if self.name("framer", need.framer, framers, need.where):
                owner = framers[need.framer]
        if need.frame not in (None, "me"):
            self.name("frame", need.frame, [f.name for f in owner.frames], need.where)


def check_names(spec: FlowSpec, positions: Positions | None = None) -> list[FlowError]:
    """Every name problem in ``spec``, in source order (empty when all is well)."""
    checker = _Checker(positions)
    for house in spec.houses:
        checker.house(house)
    return checker.errors
