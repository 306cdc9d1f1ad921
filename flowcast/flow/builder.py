"""Turn a HouseSpec into running framers: resolve names, compile acts.

Everything that can be checked before a flow runs is checked here: frame
and framer names, behaviour names and their parameters, share names.  All
problems are collected and raised together as located
:class:`~flowcast.flow.errors.FlowError` s, and nothing starts while any
remain.  Acts become plain closures over resolved shares and frames, so a
tick does no name lookups.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flowcast.behaving.lifecycle import lifecycle_of
from flowcast.behaving.registry import BehaviourError, Io, Registry
from flowcast.errors import Error
from flowcast.flow.actors import resolve_actor
from flowcast.flow.auxcycle import aux_cycles
from flowcast.flow.errors import FlowError, FlowErrors, did_you_mean
from flowcast.flow.framer import (
    ABORT,
    ABORTED,
    READIED,
    READY,
    RUN,
    RUNNING,
    START,
    STARTED,
    STOP,
    STOPPED,
    Frame,
    Framer,
    Transition,
)
from flowcast.flow.incs import inc_direct, inc_indirect
from flowcast.flow.spec import Act, FrameSpec, FramerSpec, HouseSpec, Need, Ref, Where
from flowcast.runtime.gcpause import gc_paused
from flowcast.store import HouseLike, Share, ShareNameError, Store

__all__ = ["BuiltHouse", "build_house"]

_FIAT_STATUS = {READY: READIED, START: STARTED, STOP: STOPPED, RUN: RUNNING, ABORT: ABORTED}
_ORDER = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def check(state: Any, op: str, goal: Any, tolerance: float | None) -> bool:
    """Ioflo's comparison: tolerance widens ``==`` and ``!=`` only."""
    tol = abs(tolerance or 0.0)
    try:
        if op == "==":
            try:
                return goal - tol <= state <= goal + tol
            except TypeError:
                return goal == state
        if op == "!=":
            try:
                return not (goal - tol <= state <= goal + tol)
            except TypeError:
                return goal != state
        return bool(_ORDER[op](state, goal))
    except (TypeError, KeyError):
        return False  # incomparable values (None, str vs number) never satisfy


@dataclass
class BuiltHouse:
    """A house's store and framers, ready for a skedder."""

    name: str
    store: Store
    framers: dict[str, Framer]
    taskables: list[Framer]  # active and inactive framers, in script order
    registry: Registry
    logged: list[str] = field(default_factory=list)


class _Builder:
    def __init__(
        self,
        spec: HouseSpec,
        registry: Registry,
        stamp: Callable[[], float],
        on_transition: Callable[[Transition], None] | None,
        out: Callable[[str], None],
        house: HouseLike | None = None,
    ) -> None:
        self.spec = spec
        self.house = house
        self.registry = registry
        self.stamp = stamp
        self.on_transition = on_transition
        self.out = out
        self.store = Store(stamp, name=spec.name)
        self.errors: list[FlowError] = []
        self.framers: dict[str, Framer] = {}
        self.written: set[str] = set()
        self.marks: dict[tuple[str, str, str], _Mark] = {}
        self.enter_marks: set[tuple[tuple[str, str, str], str]] = set()
        self.doer: Act | Need | None = None  # the act or need being compiled: whose ``actor.me``
        self.aux_uses: list[tuple[str, str, Where | None]] = []  # (framer, aux, where): rings are errors
        self.deferred_exits: list[Callable[[], Any]] = []  # the frame being compiled: run after its exit acts

    # -- errors ------------------------------------------------------------

    def error(self, message: str, where: Where | None, hint: str = "") -> None:
        self.errors.append(FlowError(message, where, hint))

    # -- shares --------------------------------------------------------------

    def path(self, ref_path: str, framer: Framer, frame: Frame | None) -> str:
        """Resolve Ioflo's relative addressing to an absolute share name."""
        if ref_path.startswith("."):
            return ref_path[1:]
        parts = ref_path.split(".")
        if parts[0] == "framer" and len(parts) > 2:
            if parts[1] == "me":
                parts[1] = framer.name
            if len(parts) > 4 and parts[2] == "frame" and parts[3] == "me" and frame is not None:
                parts[3] = frame.name
            named = resolve_actor(parts, self.doer)
            if named is None:
                raise ShareNameError(f"{ref_path!r} is relative to an actor, and only an act has one")
            return ".".join(named)
        if parts[0] == "frame" and len(parts) > 2:
            name = frame.name if (parts[1] == "me" and frame is not None) else parts[1]
            return ".".join(["framer", framer.name, "frame", name, *parts[2:]])
        # Ioflo: the framer's ``via`` inode, then the inodes of the frame and
        # its overs; ``me.x`` (Ioflo's "of me") takes the framer's inode only.
        inodes = [framer.inode]
        if parts[0] == "me":
            parts = parts[1:]
        elif frame is not None:
            chain = []
            node: Frame | None = frame
            while node is not None:
                chain.append(node.inode)
                node = node.over
            inodes.extend(reversed(chain))
        prefix = [piece for inode in inodes if inode for piece in inode.strip(".").split(".")]
        return ".".join([*prefix, *parts])

    def share(self, ref: Ref | str, framer: Framer, frame: Frame | None, where: Where | None) -> Share | None:
        path = ref.path if isinstance(ref, Ref) else ref
        try:
            resolved = self.path(path, framer, frame)
            share = self.store.share(resolved)
        except ShareNameError as error:
            self.error(str(error), where)
            return None
        self.bind_state_if_named(resolved)
        return share

    def bind_state_if_named(self, name: str) -> None:
        """Mirror a framer's elapsed/recurred (active/human) into
        ``framer.F.state.*`` only if the flow names them: updating two shares
        per framer per tick for nobody cost a quarter of a tick."""
        parts = name.split(".")
        if len(parts) != 4 or parts[0] != "framer" or parts[2] != "state":
            return
        target = self.framers.get(parts[1])
        if target is None:
            return
        if parts[3] in ("elapsed", "recurred") and target._elapsed_share is None:
            target.bind_state(
                self.store.share(f"framer.{target.name}.state.elapsed", {"value": 0.0}),
                self.store.share(f"framer.{target.name}.state.recurred", {"value": 0}),
            )
        elif parts[3] in ("active", "human") and target._active_share is None:
            target.bind_outline(
                self.store.share(f"framer.{target.name}.state.active", {"value": ""}),
                self.store.share(f"framer.{target.name}.state.human", {"value": ""}),
            )

    def reading(self, share: Share, fields: tuple[str, ...]) -> str:
        """The field a need reads; created as 0.0 when absent, as Ioflo does."""
        name = fields[0] if fields else "value"
        share.default(name, 0.0)
        return name

    # -- build ---------------------------------------------------------------

    def build(self) -> BuiltHouse:
        spec = self.spec
        for init in spec.inits:
            self.apply_init(init)
        for fspec in spec.framers:
            if fspec.name in self.framers:
                self.error(f"framer {fspec.name!r} is defined twice", fspec.where)
                continue
            framer = Framer(
                fspec.name,
                schedule=fspec.schedule,
                period=fspec.period,
                stamp=self.stamp,
                on_transition=self.on_transition,
            )
            framer.inode = fspec.inode or ""
            self.framers[fspec.name] = framer
        for fspec in spec.framers:
            self.build_frames(fspec)
        self.taskables = [self.framers[f.name] for f in spec.framers if f.schedule in ("active", "inactive")]
        for fspec in spec.framers:
            framer = self.framers[fspec.name]
            for frame_spec in fspec.frames:
                frame = framer.frames.get(frame_spec.name)
                if frame is not None:
                    self.compile_frame(frame_spec, frame, framer)
        for ring, where in aux_cycles(self.aux_uses):
            self.error(f"aux framers run inside each other in a loop: {' aux '.join(ring)}", where,
                       "an aux framer cannot run inside itself; break the loop")
        logged = []
        for ref in spec.logs:
            try:
                share = self.store.share(ref.path)
            except ShareNameError as error:
                self.error(str(error), None)
                continue
            self.bind_state_if_named(share.name)
            share.log()
            logged.append(share.name)
        if self.errors:
            raise FlowErrors(self.errors)
        return BuiltHouse(spec.name, self.store, self.framers, self.taskables, self.registry, logged)

    def apply_init(self, init: Any) -> None:
        try:
            name = self.store.normalise(init.dst.path if init.dst.path.startswith(".") else "." + init.dst.path)
        except ShareNameError as error:
            self.error(str(error), init.where)
            return
        share = self.store.share(name)
        self.written.add(name)
        stamp = share.stamp
        if init.data is not None:
            data = dict(init.data)
            if init.dst.fields and list(data) == ["value"]:
                data = {init.dst.fields[0]: data["value"]}
            share.update(data)
        elif init.src is not None:
            try:
                src = self.store.share(init.src.path)
            except ShareNameError as error:
                self.error(str(error), init.where)
                return
            fields = init.src.fields or tuple(src.keys())
            share.update({f: src.get(f) for f in fields})
        share.stamp = stamp  # an init is not an update: 'is updated' ignores it

    def build_frames(self, fspec: FramerSpec) -> None:
        framer = self.framers[fspec.name]
        for frame_spec in fspec.frames:
            if frame_spec.name in framer.frames:
                self.error(f"frame {frame_spec.name!r} is defined twice in framer {fspec.name!r}", frame_spec.where)
                continue
            frame = Frame(frame_spec.name, framer)
            frame.inode = frame_spec.inode or ""
            framer.frames[frame_spec.name] = frame
        names = list(framer.frames)
        specs = [f for f in fspec.frames]
        for index, frame_spec in enumerate(specs):
            frame = framer.frames[frame_spec.name]
            if frame_spec.over:
                over = self.frame(framer, frame_spec.over, frame_spec.where)
                if over is not None:
                    frame.over = over
                    over.unders.append(frame)
            if frame_spec.next:
                frame.next = self.frame(framer, frame_spec.next, frame_spec.where)
            elif index + 1 < len(specs):
                frame.next = framer.frames[specs[index + 1].name]
        for frame_spec in specs:
            if frame_spec.under:
                frame = framer.frames[frame_spec.name]
                under = self.frame(framer, frame_spec.under, frame_spec.where)
                if under is not None:
                    if under.over is not frame:
                        if under.over is not None:
                            under.over.unders.remove(under)
                        under.over = frame
                        frame.unders.append(under)
                    frame.unders.remove(under)
                    frame.unders.insert(0, under)  # the primary under: entered below this frame
        for frame in framer.frames.values():  # loops in nesting
            seen = {frame}
            over = frame.over
            while over is not None:
                if over in seen:
                    self.error(f"frame {frame.name!r} is nested inside itself", None)
                    frame.over = None
                    break
                seen.add(over)
                over = over.over
        for frame in framer.frames.values():
            frame.trace_outline()
        if fspec.first:
            framer.first = self.frame(framer, fspec.first, fspec.where)
        elif names:
            framer.first = framer.frames[names[0]]
        else:
            self.error(f"framer {fspec.name!r} has no frames", fspec.where)

    def frame(self, framer: Framer, name: str, where: Where | None) -> Frame | None:
        found = framer.frames.get(name)
        if found is None:
            self.error(
                f"framer {framer.name!r} has no frame {name!r}",
                where,
                did_you_mean(name, framer.frames),
            )
        return found

    def tasker(self, name: str, framer: Framer, where: Where | None) -> Framer | None:
        if name == "me":
            return framer
        found = self.framers.get(name)
        if found is None:
            self.error(f"no framer {name!r}", where, did_you_mean(name, self.framers))
        return found

    # -- acts ------------------------------------------------------------------

    def compile_frame(self, spec: FrameSpec, frame: Frame, framer: Framer) -> None:
        for aux_spec in spec.auxes:
            aux = self.tasker(aux_spec.framer, framer, aux_spec.where)
            if aux is None:
                continue
            if aux.schedule != "aux":
                self.error(f"framer {aux.name!r} is not an aux framer (be aux)", aux_spec.where)
                continue
            frame.auxes.append(aux)
            self.aux_uses.append((framer.name, aux.name, aux_spec.where))
        deferred_exits: list[Callable[[], Any]] = []
        self.deferred_exits = deferred_exits  # behaviour lifecycles' exit hooks join them
        for act in spec.acts:
            if act.verb == "aux":
                self.doer = act
                compiled = self.act_aux(act, frame, framer, deferred_exits)
                if compiled is not None:
                    frame.preacts.append(compiled)
                continue
            compiled = self.compile_act(act, frame, framer)
            if compiled is None:
                continue
            lists = {
                "benter": frame.beacts,
                "enter": frame.enacts,
                "renter": frame.renacts,
                "precur": frame.preacts,
                "recur": frame.reacts,
                "exit": frame.exacts,
                "rexit": frame.rexacts,
            }
            target = lists.get(act.context)
            if target is None:
                self.error(f"unknown context {act.context!r}", act.where)
                continue
            target.append(compiled)
        frame.exacts.extend(deferred_exits)

    def act_aux(self, act: Act, frame: Frame, framer: Framer, exits: list[Callable[[], Any]]):
        """A conditional aux (Ioflo's Suspender): while it runs, the frames
        below this one are suspended -- the outline is cut at this frame."""
        aux = self.tasker(act.args.get("framer", ""), framer, act.where)
        if aux is None:
            return None
        if aux.schedule != "aux":
            self.error(f"framer {aux.name!r} is not an aux framer (be aux)", act.where)
            return None
        self.aux_uses.append((framer.name, aux.name, act.where))
        needs = self.needs(act.args.get("needs", ()), frame, framer)
        if needs is None:
            return None
        head = frame.outline[: frame.outline.index(frame) + 1]
        head_human = frame.head_human

        def release() -> None:
            aux.exit_all()
            aux.main = None

        def run() -> bool:
            if aux.done:
                for need in needs:
                    if not need():
                        return False
                if aux.main is not None and aux.main is not frame:
                    return False
                if not aux.check_start():
                    return False
                aux.main = frame
                aux.enter_all()
                aux.recur()
                if aux.done:
                    release()
                    return False
                framer.change(head, head_human)
                return True
            aux.segue()
            aux.recur()
            if aux.done:
                release()
                if framer.active is not None:
                    framer.change(framer.active.outline, framer.active.human)
                return False
            return True

        def exit_unless_done() -> None:
            if not aux.done:
                release()

        exits.append(exit_unless_done)
        return run

    def compile_act(self, act: Act, frame: Frame, framer: Framer) -> Callable[[], Any] | None:
        method = getattr(self, "act_" + act.verb, None)
        if method is None:
            self.error(f"verb {act.verb!r} is not supported", act.where)
            return None
        self.doer = act  # acts do not nest; the needs inside one restore it
        return method(act, frame, framer)

    def act_print(self, act: Act, frame: Frame, framer: Framer) -> Callable[[], Any]:
        message = str(act.args.get("message", ""))
        out = self.out

        def run() -> None:
            out(message)

        return run

    def _data_into(self, data: dict[str, Any], dst: Ref) -> dict[str, Any]:
        if dst.fields:
            values = list(data.values())
            return dict(zip(dst.fields, values))
        return dict(data)

    def _direct(self, act: Act, frame: Frame, framer: Framer, inc: bool):
        """``put DATA into DST`` or ``inc DST with DATA``.

        A field nothing wrote is created as None, as Ioflo does; ``inc`` on
        it then fails and leaves it None (see flow/incs.py)."""
        dst_ref: Ref = act.args["dst"]
        share = self.share(dst_ref, framer, frame, act.where)
        if share is None:
            return None
        data = self._data_into(act.args.get("data") or {}, dst_ref)
        for key in data:
            share.default(key, None)
        if inc:
            return inc_direct(share, data, act.where)
        return lambda: share.update(data)

    def act_put(self, act: Act, frame: Frame, framer: Framer):
        return self._direct(act, frame, framer, False)

    def act_set(self, act: Act, frame: Frame, framer: Framer):
        """``set GOAL with DATA`` or ``set GOAL from SRC``; the front end resolved the goal path."""
        if act.args.get("src") is not None:
            return self._copy(act, frame, framer, False)
        return self.act_put(act, frame, framer)

    def _copy(self, act: Act, frame: Frame, framer: Framer, inc: bool):
        src_ref: Ref = act.args["src"]
        dst_ref: Ref = act.args["dst"]
        src = self.share(src_ref, framer, frame, act.where)
        dst = self.share(dst_ref, framer, frame, act.where)
        if src is None or dst is None:
            return None
        src_fields = list(src_ref.fields) or (["value"] if ("value" in src or not len(src)) else (list(dst_ref.fields) or src.keys()))
        dst_fields = list(dst_ref.fields) or (["value"] if "value" in dst else src_fields)
        if len(src_fields) != len(dst_fields):
            self.error(f"{len(src_fields)} source field(s) for {len(dst_fields)} destination field(s)", act.where)
            return None
        for f in src_fields:
            src.default(f, None)
        for f in dst_fields:
            dst.default(f, None)
        pairs = list(zip(dst_fields, src_fields))
        if inc:
            return inc_indirect(dst, src, pairs, act.where)

        def run() -> None:
            dst.update({d: src.get(s) for d, s in pairs})

        return run

    def act_copy(self, act: Act, frame: Frame, framer: Framer):
        return self._copy(act, frame, framer, False)

    def act_inc(self, act: Act, frame: Frame, framer: Framer):
        if act.args.get("src") is not None:
            return self._copy(act, frame, framer, True)
        return self._direct(act, frame, framer, True)

    def _taskers(self, act: Act, framer: Framer, default: str = "me") -> list[Framer]:
        names = act.args.get("taskers") or [default]
        found: list[Framer] = []
        for name in names:
            if name == "all":
                found.extend(t for t in self.taskables_pending() if t not in found)
                continue
            tasker = self.tasker(name, framer, act.where)
            if tasker is not None and tasker not in found:
                found.append(tasker)
        return found

    def taskables_pending(self) -> list[Framer]:
        return [self.framers[f.name] for f in self.spec.framers if f.schedule in ("active", "inactive")]

    def act_bid(self, act: Act, frame: Frame, framer: Framer):
        control = act.args.get("control")
        if control not in _FIAT_STATUS:
            self.error(f"bid control must be one of {', '.join(_FIAT_STATUS)}", act.where)
            return None
        taskers = self._taskers(act, framer)
        period = act.args.get("period")
        if period is None or control in (STOP, ABORT):  # Ioflo: only start/run/ready retime

            def run() -> None:
                for tasker in taskers:
                    tasker.desire = control

            return run
        if isinstance(period, Ref):
            share = self.share(period, framer, frame, act.where)
            if share is None:
                return None
            field = self.reading(share, period.fields)
            read = lambda: share.get(field)  # noqa: E731
        else:
            value = float(period)
            read = lambda: value  # noqa: E731

        def run_with_period() -> None:
            new = max(0.0, float(read()))
            for tasker in taskers:
                tasker.period = new
                tasker.desire = control

        return run_with_period

    def _fiat(self, control: str):
        expected = _FIAT_STATUS[control]

        def build(act: Act, frame: Frame, framer: Framer):
            taskers = self._taskers(act, framer)
            for tasker in taskers:
                if tasker.schedule != "slave":
                    self.error(f"{control} {tasker.name}: only slave framers take direct control; use 'bid {control}'", act.where)
            if len(taskers) != 1:
                self.error(f"{control} takes one slave framer", act.where)
                return None
            tasker = taskers[0]

            def run() -> bool:
                return tasker.control(control) == expected

            return run

        return build

    def act_ready(self, act, frame, framer):
        return self._fiat(READY)(act, frame, framer)

    def act_start(self, act, frame, framer):
        return self._fiat(START)(act, frame, framer)

    def act_stop(self, act, frame, framer):
        return self._fiat(STOP)(act, frame, framer)

    def act_run(self, act, frame, framer):
        return self._fiat(RUN)(act, frame, framer)

    def act_abort(self, act, frame, framer):
        return self._fiat(ABORT)(act, frame, framer)

    def act_done(self, act: Act, frame: Frame, framer: Framer):
        taskers = self._taskers(act, framer)

        def run() -> None:
            for tasker in taskers:
                tasker.done = True

        return run

    def act_go(self, act: Act, frame: Frame, framer: Framer):
        far_name = act.args.get("far", "next")
        if far_name == "next":
            far = frame.next
            if far is None:
                self.error(f"'go next' from the last frame {frame.name!r}: there is no next frame", act.where)
                return None
        elif far_name == "me":
            far = frame
        else:
            far = self.frame(framer, far_name, act.where)
            if far is None:
                return None
        tracts: list[Callable[[], Any]] = []
        needs = self.needs(act.args.get("needs", ()), frame, framer, tracts)
        if needs is None:
            return None
        transit = framer.transit
        marks = tuple(tracts)

        if not needs:
            return lambda: transit(far, marks)

        def run() -> bool:
            for need in needs:
                if not need():
                    return False
            return transit(far, marks)

        return run

    def act_let(self, act: Act, frame: Frame, framer: Framer):
        needs = self.needs(act.args.get("needs", ()), frame, framer)
        if needs is None:
            return None

        def run() -> bool:
            return all(need() for need in needs)

        return run

    # -- needs -------------------------------------------------------------

    def needs(
        self, specs: Any, frame: Frame, framer: Framer, tracts: list[Callable[[], Any]] | None = None
    ) -> list[Callable[[], bool]] | None:
        compiled = []
        ok = True
        for spec in specs:
            need = self.need(spec, frame, framer, tracts)
            if need is None:
                ok = False
            else:
                compiled.append(need)
        return compiled if ok else None

    def goal(self, need: Need, frame: Frame, framer: Framer) -> Callable[[], Any] | None:
        if need.goal_ref is not None:
            share = self.share(need.goal_ref, framer, frame, need.where)
            if share is None:
                return None
            field = self.reading(share, need.goal_ref.fields)
            return lambda: share.get(field)
        value = need.goal_value
        return lambda: value

    def need(
        self, need: Need, frame: Frame, framer: Framer, tracts: list[Callable[[], Any]] | None = None
    ) -> Callable[[], bool] | None:
        outer, self.doer = self.doer, need  # in Ioflo each need is an actor of its own
        try:
            return self._need(need, frame, framer, tracts)
        finally:
            self.doer = outer

    def _need(
        self, need: Need, frame: Frame, framer: Framer, tracts: list[Callable[[], Any]] | None
    ) -> Callable[[], bool] | None:
        kind = need.kind
        test: Callable[[], bool] | None
        if kind in ("updated", "changed"):
            test = self.marked(need, frame, framer, tracts)
            if test is None:
                return None
        elif kind == "always":
            test = lambda: True  # noqa: E731
        elif kind in ("boolean", "compare"):
            if need.state is None:
                self.error(f"{kind} need without a share", need.where)
                return None
            share = self.share(need.state, framer, frame, need.where)
            if share is None:
                return None
            field = self.reading(share, need.state.fields)
            if kind == "boolean":
                test = lambda: bool(share.get(field))  # noqa: E731
            else:
                goal = self.goal(need, frame, framer)
                if goal is None:
                    return None
                op, tol = need.op or "==", need.tolerance

                def test() -> bool:
                    return check(share.get(field), op, goal(), tol)

        elif kind in ("elapsed", "recurred"):
            goal = self.goal(need, frame, framer)
            if goal is None:
                return None
            op, tol = need.op or ">=", need.tolerance
            attr = kind

            def test() -> bool:
                return check(getattr(framer, attr), op, goal(), tol)

        elif kind == "done":
            if need.aux is not None:
                which = need.aux
                owner = framer if need.framer in (None, "me") else self.tasker(need.framer, framer, need.where)
                if owner is None:
                    return None
                if need.frame not in (None, "me"):
                    found = self.frame(owner, need.frame, need.where)
                    if found is None:
                        return None
                    frame = found
                elif owner is not framer:
                    self.error("'in framer NAME' needs 'in frame NAME' too", need.where)
                    return None
                if which == "any":
                    test = lambda: any(a.done for a in frame.auxes)  # noqa: E731
                elif which == "all":
                    test = lambda: bool(frame.auxes) and all(a.done for a in frame.auxes)  # noqa: E731
                else:
                    aux = self.tasker(which, framer, need.where)
                    if aux is None:
                        return None
                    test = lambda: aux in frame.auxes and aux.done  # noqa: E731
            else:
                tasker = self.tasker(need.tasker or "me", framer, need.where)
                if tasker is None:
                    return None
                test = lambda: tasker.done  # noqa: E731
        elif kind == "status":
            tasker = self.tasker(need.tasker or "me", framer, need.where)
            if tasker is None:
                return None
            status = need.status
            test = lambda: tasker.status == status  # noqa: E731
        else:
            self.error(f"condition kind {kind!r} is not supported", need.where)
            return None
        if need.negate:
            inner = test
            return lambda: not inner()
        return test

    def marked(
        self, need: Need, frame: Frame, framer: Framer, tracts: list[Callable[[], Any]] | None
    ) -> Callable[[], bool] | None:
        """``SHARE is updated`` / ``is changed``: since this frame's transition
        last fired on it.  The mark is taken only when the transition happens
        (a tract), so a condition that is true but loses to another stays true."""
        if need.state is None:
            self.error(f"'{need.kind}' need without a share", need.where)
            return None
        share = self.share(need.state, framer, frame, need.where)
        if share is None:
            return None
        marked_frame = frame
        if need.frame not in (None, "me"):
            found = self.frame(framer, need.frame, need.where)
            if found is None:
                return None
            marked_frame = found
        key = (share.name, framer.name, need.marker or marked_frame.name)
        mark = self.marks.setdefault(key, _Mark())
        stamp = self.stamp
        if need.kind == "updated":

            def take() -> None:
                mark.stamp = mark.used = stamp()

            def test() -> bool:
                now = share.stamp
                if now is None:
                    return False
                return mark.stamp is None or now > mark.stamp or (now == mark.stamp and mark.used != mark.stamp)

        else:

            def take() -> None:
                mark.data = share.fields()

            def test() -> bool:
                seen = mark.data
                if seen is None:
                    return True
                return any(field not in seen or seen[field] != value for field, value in share.fields().items())

        if tracts is not None:
            tracts.append(take)
        if need.frame is not None:
            # ``in frame F``: entering F also marks, first of its enter acts.
            entered = (key, need.kind)
            if entered not in self.enter_marks:
                self.enter_marks.add(entered)
                if need.kind == "updated":

                    def on_enter() -> None:
                        mark.stamp = stamp()

                else:
                    on_enter = take
                marked_frame.enacts.insert(0, on_enter)
        return test

    # -- behaviours ----------------------------------------------------------

    def act_do(self, act: Act, frame: Frame, framer: Framer):
        name = act.args.get("behaviour", "")
        found = self.registry.find(name)
        if found is None:
            self.error(
                f"unknown behaviour {name!r}",
                act.where,
                did_you_mean(name, self.registry.names())
                or (f"known: {', '.join(self.registry.names())}" if self.registry.names() else "load a behaviour module with 'load PATH'"),
            )
            return None
        try:
            params = found.bind(dict(act.args.get("with") or {}))
        except BehaviourError as error:
            self.error(str(error), act.where)
            return None
        io = Io(self.store, framer=framer.name, frame=frame.name, house=self.house)
        for ref in act.args.get("from") or ():
            share = self.share(ref, framer, frame, act.where)
            if share is not None:
                io.inputs.append(share)
        for ref in act.args.get("to") or ():
            share = self.share(ref, framer, frame, act.where)
            if share is not None:
                io.outputs.append(share)
        for key, path in (act.args.get("per") or {}).items():
            share = self.share(str(path), framer, frame, act.where)
            if share is not None:
                io.named[key] = share
        if found.form == "function":
            target = found.target
            return _located(lambda: target(io, **params), name, act.where)
        if found.form == "class":
            try:
                instance = found.target(io, **params)
            except Exception as error:  # noqa: BLE001 - user code: report where it was asked for
                self.error(f"behaviour {name!r} failed to start: {error!r}", act.where)
                return None
            cycle = lifecycle_of(instance)
            if cycle is None:
                return _located(instance, name, act.where)
            frame.enacts.append(_located(cycle.enter, name, act.where))
            # After the frame's own exit acts, like ``finally``.
            self.deferred_exits.append(_located(cycle.exit, name, act.where))
            return _located(cycle.call, name, act.where)
        # Generator: one run per frame entry, advanced each time the act runs.
        factory = found.target
        state: dict[str, Any] = {"gen": None}

        def run() -> Any:
            gen = state["gen"]
            if gen is None:
                gen = state["gen"] = factory(io, **params)
            try:
                return next(gen)
            except StopIteration:
                state["gen"] = None
                return None

        def close() -> None:
            gen, state["gen"] = state["gen"], None
            if gen is not None:
                gen.close()

        frame.exacts.append(close)
        return _located(run, name, act.where)


class BehaviourFailure(RuntimeError, Error):
    """A behaviour raised while running; says which and where it was asked for."""


def _located(call: Callable[[], Any], name: str, where: Where | None) -> Callable[[], Any]:
    place = f"{where}: " if where is not None else ""

    def run() -> Any:
        try:
            return call()
        except Exception as error:
            raise BehaviourFailure(f"{place}behaviour {name!r} raised {error!r}") from error

    return run


class _Mark:
    """What an ``updated``/``changed`` condition last saw of its share."""

    __slots__ = ("stamp", "used", "data")

    def __init__(self) -> None:
        self.stamp: float | None = None
        self.used: float | None = None
        self.data: dict[str, Any] | None = None


def build_house(
    spec: HouseSpec,
    *,
    stamp: Callable[[], float],
    registry: Registry | None = None,
    on_transition: Callable[[Transition], None] | None = None,
    out: Callable[[str], None] = print,
    base: Path | None = None,
    house: HouseLike | None = None,
) -> BuiltHouse:
    """Resolve and compile one house; raise FlowErrors listing every problem.

    ``house`` is what behaviours see as ``io.house`` (the running House:
    its scheduler and router), so stock behaviours can wire stacks.
    """
    if registry is None:
        registry = Registry()
        registry.load_entry_points()
    problems: list[FlowError] = []
    for load in spec.loads:
        try:
            registry.load(load, base)
        except BehaviourError as error:
            problems.append(FlowError(str(error), spec.load_where.get(load, spec.where)))
    if problems:
        raise FlowErrors(problems)
    with gc_paused():
        return _Builder(spec, registry, stamp, on_transition, out, house).build()
