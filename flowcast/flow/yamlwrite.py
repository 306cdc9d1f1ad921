"""The YAML writer: a flow model as the YAML :func:`~flowcast.flow.yamlflow.parse_yaml` reads back equal.

Kept apart from the reader because writing knows nothing of nodes or
positions, only of the model; the two meet in the verb table (each model
verb's writer is found through it) and in the round-trip tests, which
check ``.flo -> model -> YAML -> model`` gives an equal model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml

from flowcast.flow import florender as render
from flowcast.flow.errors import FlowError
from flowcast.flow.spec import Act, FlowSpec, FramerSpec, FrameSpec, HouseSpec, Init, Need, Ref
from flowcast.flow.verbs import ACTS, FIXED, NATIVE, each
from flowcast.flow.yamlnodes import DUMPER

__all__ = ["dump_yaml", "go_human"]


def go_human(far: str, conditions: list[str]) -> str:
    """The statement text a ``go`` act shows in traces when none is given."""
    return f"go {far} if {' and '.join(conditions)}" if conditions else f"go {far}"


def dump_yaml(spec: FlowSpec) -> str:
    """The flow as YAML that :func:`parse_yaml` reads back to an equal model."""
    houses = [_house(h) for h in spec.houses]
    doc: dict[str, Any] = houses[0] if len(houses) == 1 else {"houses": houses}
    return yaml.dump(doc, Dumper=DUMPER, sort_keys=False, default_flow_style=None, allow_unicode=True, width=100)


def _data(data: dict[str, Any]) -> Any:
    return data["value"] if list(data) == ["value"] else dict(data)


def _refs(refs: list[Ref]) -> Any:
    return render.ref(refs[0]) if len(refs) == 1 else [render.ref(r) for r in refs]


def _house(house: HouseSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"house": house.name}
    if house.loads:
        out["load"] = list(house.loads)
    if house.logs:
        out["log"] = [render.ref(r) for r in house.logs]
    if house.inits:
        out["init"] = [_init(i) for i in house.inits]
    if house.framers:
        out["framers"] = [_framer(f) for f in house.framers]
    return out


def _init(init: Init) -> dict[str, Any]:
    out: dict[str, Any] = {"init": render.ref(init.dst)}
    if init.src is not None:
        out["from"] = render.ref(init.src)
    else:
        out["with"] = _data(init.data or {})
    return out


def _framer(framer: FramerSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"framer": framer.name, "be": framer.schedule}
    if framer.period:
        out["at"] = framer.period
    if framer.first is not None and (not framer.frames or framer.first != framer.frames[0].name):
        out["first"] = framer.first
    if framer.inode is not None:
        out["via"] = framer.inode
    out["frames"] = [_frame(f) for f in framer.frames]
    return out


def _frame(frame: FrameSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"frame": frame.name}
    if frame.over is not None:
        out["in"] = frame.over
    if frame.inode is not None:
        out["via"] = frame.inode
    if frame.next is not None:
        out["next"] = frame.next
    if frame.under is not None:
        out["under"] = frame.under
    if frame.auxes:
        out["aux"] = [a.framer for a in frame.auxes]
    if frame.acts:
        out["acts"] = [_act(a) for a in frame.acts]
    return out


def _act(act: Act) -> dict[str, Any]:
    writer = _WRITERS.get(act.verb)
    if writer is None:
        raise FlowError(f"act {act.verb!r} cannot be written as YAML", act.where)
    out = writer(act.verb, act.args)
    if act.verb not in FIXED and act.context != NATIVE.get(act.verb):
        out["at"] = act.context
    return out


def _write_let(verb: str, a: dict[str, Any]) -> dict[str, Any]:
    return {"let": render.needs(a["needs"])}


def _write_aux(verb: str, a: dict[str, Any]) -> dict[str, Any]:
    return {"aux": a["framer"], "if": render.needs(a["needs"])}


def _write_do(verb: str, a: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"do": a["behaviour"]}
    if a.get("name") is not None:
        out["as"] = a["name"]
    if a.get("inode") is not None:
        out["via"] = a["inode"]
    for key in ("with", "per"):
        if a.get(key):
            out[key] = _data(a[key])
    for key in ("from", "to"):
        if a.get(key):
            out[key] = _refs(a[key])
    return out


def _write_put(verb: str, a: dict[str, Any]) -> dict[str, Any]:
    return {"put": _data(a["data"]), "into": render.ref(a["dst"])}


def _write_goal(verb: str, a: dict[str, Any]) -> dict[str, Any]:
    """``inc`` and ``set``: a destination and ``with`` data or ``from`` a share."""
    dst: Ref = a["dst"]
    short = verb == "set" and dst.path in ("framer.me.goal.elapsed", "framer.me.goal.recurred") and not dst.fields
    out: dict[str, Any] = {verb: dst.path.rsplit(".", 1)[1] if short else render.ref(dst)}
    if a.get("src") is not None:
        out["from"] = render.ref(a["src"])
    else:
        out["with"] = _data(a["data"])
    return out


def _write_copy(verb: str, a: dict[str, Any]) -> dict[str, Any]:
    return {"copy": render.ref(a["src"]), "into": render.ref(a["dst"])}


def _write_print(verb: str, a: dict[str, Any]) -> dict[str, Any]:
    return {"print": a["message"]}


def _write_bid(verb: str, a: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"bid": a["control"]}
    if a["taskers"] != ["me"]:
        out["taskers"] = list(a["taskers"])
    period = a.get("period")
    if period is not None:
        out["period"] = render.ref(period) if isinstance(period, Ref) else period
    return out


def _write_taskers(verb: str, a: dict[str, Any]) -> dict[str, Any]:
    t = list(a["taskers"])
    return {verb: t[0] if len(t) == 1 else t}


def _write_go(verb: str, a: dict[str, Any]) -> dict[str, Any]:
    needs: list[Need] = list(a["needs"])
    human = a.get("human", "")
    out: dict[str, Any]
    default: str
    if a["far"] == "next" and len(needs) == 1 and not needs[0].negate and needs[0].op == ">=" \
            and needs[0].goal_ref is None and needs[0].tolerance is None \
            and human.split(" ", 1)[0] in ("timeout", "repeat"):
        n = needs[0]
        if n.kind == "elapsed" and isinstance(n.goal_value, float) and human.startswith("timeout"):
            value: int | float = n.goal_value
            tail = human.split(" ", 1)[-1]
            if tail.isdigit() and tail.isascii() and float(int(tail)) == value:
                value = int(tail)  # written as an integer: keep it so
            out = {"timeout": value}
            default = f"timeout {_scalar_text(value)}"
        elif n.kind == "recurred" and type(n.goal_value) is int and human.startswith("repeat"):
            out = {"repeat": n.goal_value}
            default = f"repeat {n.goal_value}"
        else:
            out, default = _plain_go(a["far"], needs)
    else:
        out, default = _plain_go(a["far"], needs)
    if human != default:
        out["human"] = human
    return out


def _scalar_text(value: Any) -> str:
    """How YAML will write a scalar, which is how a parser will read its text back."""
    return yaml.dump(value, Dumper=DUMPER).splitlines()[0]


def _plain_go(far: str, needs: list[Need]) -> tuple[dict[str, Any], str]:
    out: dict[str, Any] = {"go": far}
    text = render.needs(needs)
    if text:
        out["if"] = text
    return out, go_human(far, [text] if text else [])


#: By model verb: its YAML writer, ``(verb, args) -> mapping``.
_WRITERS: dict[str, Callable[[str, dict[str, Any]], dict[str, Any]]] = each({
    "go": _write_go, "let": _write_let, "aux": _write_aux, "do": _write_do, "put": _write_put,
    "inc": _write_goal, "set": _write_goal, "copy": _write_copy, "print": _write_print, "bid": _write_bid,
    **dict.fromkeys(("ready", "start", "stop", "run", "abort", "done"), _write_taskers),
}, "the YAML writer (yamlwrite.py)", ACTS)
