"""Conditions compiled: each Need of a ``go``, ``let`` or conditional ``aux`` becomes a test.

Kept apart from the acts because conditions are their own small language
(compare, elapsed, done, status, updated/changed with its marks) and the
part of the builder Ioflo's differential tests exercise most.  Mixed into
the builder: it uses the builder's shares, framers, frames and errors.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from flowcast.flow.framer import Frame, Framer
from flowcast.flow.spec import Need

__all__ = ["NeedCompiler", "check"]

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


class NeedCompiler:
    """The builder's conditions: ``needs`` compiles a list, None when any is wrong."""

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



class _Mark:
    """What an ``updated``/``changed`` condition last saw of its share."""

    __slots__ = ("stamp", "used", "data")

    def __init__(self) -> None:
        self.stamp: float | None = None
        self.used: float | None = None
        self.data: dict[str, Any] | None = None


