"""Model -> FloScript text fragments (share references, values, conditions).

The YAML schema writes share references and conditions in FloScript's own
words (``value in .state.depth``, ``elapsed >= goal``), so dumping a model
to YAML needs the inverse of :mod:`flowords`/:mod:`floneeds`.  Every
fragment rendered here reads back to an equal model element.
"""

from __future__ import annotations

import math
from typing import Any

from flowcast.flow.errors import FlowError
from flowcast.flow.flolex import RESERVED
from flowcast.flow.spec import Need, Ref


def ref(r: Ref) -> str:
    return " ".join(r.fields) + " in " + r.path if r.fields else r.path


def quoted(text: str) -> str:
    if "\n" in text or "\r" in text:
        raise FlowError(f"string {text!r} spans lines and cannot be written as FloScript")
    if '"' not in text:
        return f'"{text}"'
    if "'" not in text:
        return f"'{text}'"
    raise FlowError(f"string {text!r} holds both quote kinds and cannot be written as FloScript")


def number(value: int | float) -> str:
    if isinstance(value, float):
        if math.isinf(value):
            return "+inf" if value > 0 else "-inf"
        return repr(value)
    return str(value)


def goal(value: Any) -> str:
    """A direct goal: strings are always quoted, since bare words are paths there."""
    if value is None:
        return "none"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (int, float)):
        return number(value)
    if isinstance(value, str):
        return quoted(value)
    raise FlowError(f"goal {value!r} is not a number, string, boolean or none")


def _goal_of(need: Need, framer_state: str | None) -> str:
    if need.goal_ref is not None:
        if framer_state is not None and need.goal_ref == Ref(f"framer.me.goal.{framer_state}"):
            return "goal"
        return ref(need.goal_ref)
    return goal(need.goal_value)


def _tolerance(need: Need) -> str:
    return f" +- {number(need.tolerance)}" if need.tolerance is not None else ""


def _bare(word: str) -> bool:
    return bool(word) and word.replace("_", "a").isalnum() and word.isascii() and word not in RESERVED


def need(n: Need) -> str:
    """One condition as FloScript (no leading ``if``)."""
    text = _body(n)
    return f"not {text}" if n.negate else text


def _body(n: Need) -> str:
    kind = n.kind
    if kind == "boolean" and n.state is not None:
        return ref(n.state)
    if kind == "compare" and n.state is not None and n.op:
        return f"{ref(n.state)} {n.op} {_goal_of(n, None)}{_tolerance(n)}"
    if kind in ("elapsed", "recurred") and n.op:
        return f"{kind} {n.op} {_goal_of(n, kind)}{_tolerance(n)}"
    if kind == "done":
        place = ""
        if n.frame is not None:
            place += f" in frame {n.frame}"
        if n.framer is not None:
            place += f" in framer {n.framer}"
        if n.aux in ("any", "all"):
            return f"{n.aux}{place} is done"
        if n.aux:
            return f"aux {n.aux}{place} is done"
        return f"{n.tasker or 'me'} is done"
    if kind == "status" and n.tasker and n.status:
        return f"{n.tasker} is {n.status}"
    if kind in ("updated", "changed") and n.state is not None:
        text = f"{n.state.path} is {kind}"
        if n.frame is not None:
            text += f" in frame {n.frame}"
        if n.marker is not None:
            text += " by " + (n.marker if _bare(n.marker) else quoted(n.marker))
        return text
    raise FlowError(f"condition of kind {kind!r} is incomplete and cannot be written")


def needs(ns: list[Need] | tuple[Need, ...]) -> str:
    """Conditions joined with ``and``; '' for the single ``always``."""
    real = [n for n in ns if n.kind != "always" or n.negate]
    return " and ".join(need(n) for n in real)
