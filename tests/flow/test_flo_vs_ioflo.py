"""The parser against Ioflo's own builder, statement by statement.

Ioflo 2.0.3's ``Builder`` is run on the same script with its frame methods
(``addEnact``, ``addPreact``, ...) wrapped, so every act it builds is
recorded -- verb, context, parameters, share paths, needs -- before Ioflo
resolves anything.  flowcast's model of the script must describe exactly the
same acts, in the same contexts and order, with the same paths and values.
This checks what the trace-level differential suite cannot see: paths,
fields, data and conditions that a run may never exercise.

Scripts using flowcast extensions (``load`` of a module, ``log``, ``do ...
to``) are not Ioflo scripts and are left out; so are scripts outside
flowcast's subset.
"""

from __future__ import annotations

import collections.abc  # noqa: F401  -- ioflo 2.0.3 needs it imported first on 3.11
import glob
import importlib.util
from pathlib import Path
from typing import Any

import pytest
from ioflo.aid.consoling import getConsole
from ioflo.base import building, doing, framing
from ioflo.base.globaling import StatusNames

from flowcast.flow.errors import FlowError
from flowcast.flow.floscript import load_flo
from flowcast.flow.spec import Act, FrameSpec, Need

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(
    glob.glob(str(ROOT / "flows/*.flo"))
    + glob.glob(str(ROOT / "tests/flow/corpus/*.flo"))
    + glob.glob(str(Path(importlib.util.find_spec("ioflo").origin).parent / "app/plan/*.flo"))
)
_CONTEXT_OF = {"addBeact": "benter", "addEnact": "enter", "addRenact": "renter", "addReact": "recur",
               "addPreact": "precur", "addExact": "exit", "addRexact": "rexit"}


def _camel(dotted: str) -> str:
    return "".join(p.capitalize() for p in dotted.split("."))


def _name(x: Any) -> Any:
    return x if x is None or isinstance(x, str) else x.name


def ioflo_build(path: str) -> tuple[dict[tuple[str, str], dict[str, list[Any]]], list[Any]]:
    """(framer, frame) -> context -> normalised acts as Ioflo's builder makes them; and its houses."""
    record: dict[tuple[str, str], dict[str, list[Any]]] = {}
    saved = {name: getattr(framing.Frame, name) for name in list(_CONTEXT_OF) + ["addAux"]}
    registry = doing.Doer.Registry
    # flowcast-only behaviours get placeholder entries for the build; resolution then fails, after recording
    kinds = {_camel(a.args["behaviour"]) for h in load_flo(path).houses for f in h.framers for fr in f.frames
             for a in fr.acts if a.verb == "do"}
    placeholders = [k for k in kinds if k not in registry]

    def wrap(name: str) -> Any:
        original = saved[name]

        def add(self: Any, act: Any) -> Any:
            if not dispatching:  # resolution adds acts of its own (Doer restarts); only the build counts
                return original(self, act)
            framer = self.framer if isinstance(self.framer, str) else self.framer.name
            ctx = _CONTEXT_OF.get(name, "aux")
            entry = record.setdefault((framer, self.name), {})
            entry.setdefault(ctx, []).append(_from_ioflo(act) if ctx != "aux" else ("aux", act))
            return original(self, act)

        return add

    dispatching: list[bool] = []
    dispatch = building.Builder.dispatch

    def recording_dispatch(self: Any, tokens: Any) -> Any:
        dispatching.append(True)
        try:
            return dispatch(self, tokens)
        finally:
            dispatching.pop()

    console = getConsole()
    verbosity = console._verbosity
    console.reinit(verbosity=console.Wordage.mute)
    try:
        for name in saved:
            setattr(framing.Frame, name, wrap(name))
        building.Builder.dispatch = recording_dispatch  # type: ignore[method-assign]
        for kind in placeholders:
            registry[kind] = None
        builder = building.Builder(fileName=path)
        try:
            builder.build()
        except Exception:  # noqa: BLE001 -- resolution of flowcast-only behaviours fails after recording
            pass
    finally:
        for name, original in saved.items():
            setattr(framing.Frame, name, original)
        for kind in placeholders:
            registry.pop(kind, None)
        building.Builder.dispatch = dispatch  # type: ignore[method-assign]
        console.reinit(verbosity=verbosity)
    return record, builder.houses


def ioflo_acts(path: str) -> dict[tuple[str, str], dict[str, list[Any]]]:
    return ioflo_build(path)[0]


def _need_from_ioflo(act: Any) -> tuple[Any, ...]:
    negate = type(act).__name__ == "Nact"
    p = dict(act.parms)
    kind = act.actor
    if kind == "NeedDirect":
        body: tuple[Any, ...] = ("direct", p["state"], p["stateField"], p["comparison"], p["goal"], p["tolerance"] or 0)
    elif kind == "NeedIndirect":
        body = ("indirect", p["state"], p["stateField"], p["comparison"], p["goal"], p["goalField"],
                p["tolerance"] or 0)
    elif kind == "NeedBoolean":
        body = ("boolean", p["state"], p["stateField"])
    elif kind == "NeedDone":
        body = ("done", p["tasker"])
    elif kind == "NeedDoneAux":
        body = ("doneaux", p["tasker"], p["framer"], p["frame"])
    elif kind == "NeedStatus":
        body = ("status", p["tasker"], StatusNames[p["status"]].lower())
    elif kind in ("NeedUpdate", "NeedChange"):
        body = (kind[4:].lower() + "d", p["share"], p["frame"], p["marker"])
    else:
        body = (kind, p)
    return (negate, *body)


def _from_ioflo(act: Any) -> tuple[Any, ...]:
    kind = act.actor if isinstance(act.actor, str) else type(act.actor).__name__
    p = dict(act.parms or {})
    if kind == "Transiter":
        return ("go", p["far"], [_need_from_ioflo(n) for n in p["needs"]], p["human"])
    if kind == "Suspender":
        return ("suspend", p["aux"], [_need_from_ioflo(n) for n in p["needs"]])
    if kind in ("NeedDirect", "NeedIndirect", "NeedBoolean", "NeedDone", "NeedDoneAux", "NeedStatus",
                "NeedUpdate", "NeedChange"):
        return ("let", _need_from_ioflo(act))
    if kind == "PokeDirect":
        return ("put", dict(p["sourceData"]), p["destination"], list(p["destinationFields"]))
    if kind == "PokeIndirect":
        return ("copy", p["source"], list(p["sourceFields"]), p["destination"], list(p["destinationFields"]))
    if kind in ("IncDirect", "GoalDirect"):
        verb = "inc" if kind.startswith("Inc") else "set"
        return (verb, p["destination"], list(p["destinationFields"]), dict(p["sourceData"]))
    if kind in ("IncIndirect", "GoalIndirect"):
        verb = "inc" if kind.startswith("Inc") else "set"
        return (verb, p["destination"], list(p["destinationFields"]), p["source"], list(p["sourceFields"]))
    if kind == "Printer":
        return ("print", p["message"])
    if kind.startswith("Want"):
        return ("bid", kind[4:].lower(), list(p["taskers"]), p["period"], p["source"], p["sourceField"])
    if kind.startswith("Fiat"):
        return (kind[4:].lower(), [p["tasker"]])
    if kind == "CompleteDone":
        return ("done", list(p["taskers"]))
    prerefs = act.prerefs or {}
    return ("do", kind, dict(act.inits or {}), dict(act.ioinits or {}), p,
            {k: list(v) for k, v in prerefs.get("parms", {}).items()})


def _need_ours(n: Need) -> tuple[Any, ...]:
    field = n.state.fields[0] if n.state is not None and n.state.fields else None
    tol = n.tolerance or 0
    if n.kind in ("elapsed", "recurred"):
        state, field = f"framer.me.state.{n.kind}", "value"
    elif n.state is not None:
        state = n.state.path
    if n.kind in ("compare", "elapsed", "recurred"):
        if n.goal_ref is None:
            body: tuple[Any, ...] = ("direct", state, field, n.op, n.goal_value, tol)
        else:
            goal_field = n.goal_ref.fields[0] if n.goal_ref.fields else None
            if n.kind != "compare" and n.goal_ref.path == f"framer.me.goal.{n.kind}":
                goal_field = "value"  # Ioflo's 'goal' takes the state's field
            body = ("indirect", state, field, n.op, n.goal_ref.path, goal_field, tol)
    elif n.kind == "boolean":
        body = ("boolean", state, field)
    elif n.kind == "done" and n.tasker is not None:
        body = ("done", n.tasker)
    elif n.kind == "done":
        framer = n.framer if n.framer is not None else "me"
        frame = n.frame if n.frame is not None else ("me" if n.aux in ("any", "all") else "")
        body = ("doneaux", n.aux, framer, frame)
    elif n.kind == "status":
        body = ("status", n.tasker, n.status)
    else:
        body = (n.kind, state, n.frame or "", n.marker or "")
    return (n.negate, *body)


def _fields(fields: tuple[str, ...]) -> list[str]:
    return list(fields)


def _ours(act: Act) -> tuple[Any, ...]:
    a = act.args
    verb = act.verb
    if verb == "go":
        return ("go", a["far"], [_need_ours(n) for n in a["needs"] if n.kind != "always"], a["human"])
    if verb == "let":
        raise AssertionError("let acts are compared need by need")
    if verb == "put":
        return ("put", a["data"], a["dst"].path, _fields(a["dst"].fields))
    if verb == "copy":
        return ("copy", a["src"].path, _fields(a["src"].fields), a["dst"].path, _fields(a["dst"].fields))
    if verb in ("inc", "set"):
        dst_fields = _fields(a["dst"].fields)
        if verb == "set" and a["dst"].path in ("framer.me.goal.elapsed", "framer.me.goal.recurred"):
            dst_fields = ["value"]  # makeFramerGoal names the field
        if a["src"] is None:
            return (verb, a["dst"].path, dst_fields, a["data"])
        return (verb, a["dst"].path, dst_fields, a["src"].path, _fields(a["src"].fields))
    if verb == "print":
        return ("print", a["message"])
    if verb == "bid":
        period = a["period"]
        if period is None or isinstance(period, float):
            return ("bid", a["control"], a["taskers"], period, None, None)
        return ("bid", a["control"], a["taskers"], None, period.path, period.fields[0] if period.fields else None)
    if verb in ("ready", "start", "stop", "run", "abort", "done"):
        return (verb, a["taskers"])
    if verb == "do":
        inits = {"name": _camel(a["name"])} if a["name"] else {}
        ioinits = dict(a["per"])
        if a["inode"]:
            ioinits["inode"] = a["inode"]
        froms = {r.path: _fields(r.fields) for r in a["from"]}
        return ("do", _camel(a["behaviour"]), inits, ioinits, dict(a["with"]), froms)
    if verb == "aux":  # a conditional aux: Ioflo's Suspender preact, in the same place
        return ("suspend", a["framer"], [_need_ours(n) for n in a["needs"]])
    raise AssertionError(f"unexpected verb {verb}")


def our_acts(frame: FrameSpec) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for act in frame.acts:
        if act.verb == "let":
            out.setdefault("benter", []).extend(("let", _need_ours(n)) for n in act.args["needs"])
        else:
            out.setdefault(act.context, []).append(_ours(act))
    return out


def _comparable(path: str) -> bool:
    text = Path(path).read_text()
    words = [line.split()[0] for line in text.splitlines() if line.split() and not line.lstrip().startswith("#")]
    if "load" in words or "log" in words:
        return False
    if any(" to " in line and line.split()[0] == "do" for line in text.splitlines() if line.split()):
        return False
    try:
        load_flo(path)
    except FlowError:
        return False
    return True


COMPARED = [p for p in SCRIPTS if _comparable(p)]


def test_enough_scripts_are_compared() -> None:
    assert len(COMPARED) >= 20


@pytest.mark.parametrize("path", COMPARED, ids=lambda p: Path(p).name)
def test_same_acts_as_ioflo_builder(path: str) -> None:
    spec = load_flo(path)
    theirs = ioflo_acts(path)
    ours: dict[tuple[str, str], dict[str, list[Any]]] = {}
    for house in spec.houses:
        for framer in house.framers:
            for frame in framer.frames:
                entry = our_acts(frame)
                assert all(not a.needs for a in frame.auxes), "conditional auxes are acts"
                auxes = [("aux", a.framer) for a in frame.auxes]
                if auxes:
                    entry["aux"] = auxes
                ours[(framer.name, frame.name)] = entry
    # Conditional auxes are precur acts on both sides, in script order.
    assert set(ours) >= set(theirs)
    for key in ours:
        assert ours[key] == theirs.get(key, {}), f"{Path(path).name} {key}"


@pytest.mark.parametrize("path", COMPARED, ids=lambda p: Path(p).name)
def test_same_houses_framers_frames_and_inits_as_ioflo(path: str) -> None:
    from ioflo.base.globaling import ScheduleNames

    spec = load_flo(path)
    _, houses = ioflo_build(path)
    assert [h.name for h in houses] == [h.name for h in spec.houses]
    for house, ours in zip(houses, spec.houses):
        theirs = [(f.name, ScheduleNames[f.schedule], f.period, _name(f.first) or None, f.inode or None)
                  for f in house.framers]
        assert theirs == [(f.name, f.schedule, f.period, f.first, f.inode) for f in ours.framers]
        for framer, our_framer in zip(house.framers, ours.framers):
            frames = {name: fr for name, fr in framer.frameNames.items()}
            assert list(frames) == [f.name for f in our_framer.frames]
            names = [f.name for f in our_framer.frames]
            for i, frame in enumerate(our_framer.frames):
                it = frames[frame.name]
                lexical = frame.next if frame.next is not None else (names[i + 1] if i + 1 < len(names) else None)
                assert (_name(it.over), _name(it.next_), it.inode or None) == (frame.over, lexical, frame.inode)
                if frame.under is not None:
                    assert _name(it.unders[0]) == frame.under
        for init in ours.inits:  # Ioflo applies inits to the store at build time
            share = house.store.fetch(init.dst.path if init.dst.path.startswith(".") else "." + init.dst.path)
            assert share is not None
            if init.data is not None:
                assert {k: share[k] for k in init.data} == init.data
