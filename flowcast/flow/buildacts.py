"""Acts compiled: each Act of a frame becomes a closure over resolved shares and framers.

One method per model verb, ``act_VERB``, found through the verb table
(flow/verbs.py) so a verb the table names without a compiler fails at
import, not in the middle of a build.  Mixed into the builder: it uses the
builder's shares, framers, frames, conditions and errors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flowcast.behaving.lifecycle import lifecycle_of
from flowcast.behaving.registry import BehaviourError, Io
from flowcast.errors import Error
from flowcast.flow.errors import did_you_mean
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
)
from flowcast.flow.incs import inc_direct, inc_indirect
from flowcast.flow.spec import Act, Ref, Where

__all__ = ["ActCompiler", "BehaviourFailure"]

_FIAT_STATUS = {READY: READIED, START: STARTED, STOP: STOPPED, RUN: RUNNING, ABORT: ABORTED}


class ActCompiler:
    """The builder's acts: ``act_VERB(act, frame, framer)`` returns the act's closure, or None after an error."""

    def act_aux(self, act: Act, frame: Frame, framer: Framer):
        """A conditional aux (Ioflo's Suspender): while it runs, the frames
        below this one are suspended -- the outline is cut at this frame.
        Leaving the frame with the aux still running ends it, after the
        frame's own exit acts."""
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

        self.deferred_exits.append(exit_unless_done)
        return run


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
        io = Io(self.store, framer=framer.name, frame=frame.name, house=self.house, registry=self.registry)
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


