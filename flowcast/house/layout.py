"""Estate layouts: one YAML file says what an estate (host) runs.

``houses/ESTATE.yaml`` names the estate, its keep and runtime directories,
its roads (UDP channels) and the estates they join, the authorization
policy for traffic arriving by road, and which flow each house runs.  The
schema is in docs/layouts.md.

A layout is read once, before anything starts, so every mistake in it is
reported at once: :func:`load_layout` collects all the problems -- each
located as ``file:line:col`` with the line and a caret, like a flow-script
error -- and raises them together as one :class:`LayoutError`.  Bad input
never produces a traceback and never half-starts an estate.

The file is composed into YAML nodes (not loaded into Python objects) by
the located YAML reader YAML flows use too (flow/yamlnodes.py), so every
value keeps its position, duplicate keys are caught instead of silently
overwritten, and no YAML tag can build anything but plain values.  What a
layout is lives in layoutspec.py, how its values are checked in
layoutread.py; this module loads and plans.
Names are checked with the same rules the keep and the wire use
(:func:`flowcast.transport.keep.validate_name`) so nothing a layout names
can later become a surprising path or log line.

:func:`plan_houses` turns a layout into the concrete list of house
processes for a number of cores: the manor first, then every entry's
houses with their yard names.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from flowcast.flow.errors import FlowError, Where, decode_error
from flowcast.flow.loader import YAML_SUFFIXES
from flowcast.house.layoutread import LayoutReader
from flowcast.house.layoutspec import (
    ACCEPTANCES,
    ACCESSES,
    MAX_ERRORS,
    MAX_FILE_BYTES,
    MAX_PLAN,
    EstateLayout,
    HouseEntry,
    HousePlan,
    LayoutError,
    RemoteSpec,
    RoadSpec,
    RuleSpec,
)

__all__ = [
    "ACCEPTANCES",
    "ACCESSES",
    "MAX_FILE_BYTES",
    "EstateLayout",
    "HouseEntry",
    "HousePlan",
    "LayoutError",
    "RemoteSpec",
    "RoadSpec",
    "RuleSpec",
    "Where",
    "is_layout",
    "load_layout",
    "plan_houses",
]


# -- loading ------------------------------------------------------------------


def load_layout(path: Path | str, *, data: bytes | None = None) -> EstateLayout:
    """The estate layout in ``path``; :class:`LayoutError` listing every problem in it.

    With ``data`` the layout is that text, as read from ``path`` earlier:
    a restarted house gets the text its supervisor read, not the file as
    edited since (relative paths still resolve against ``path``'s folder).
    """
    p = Path(path)
    file = str(p)
    if data is None:
        try:
            with p.open("rb") as f:
                data = f.read(MAX_FILE_BYTES + 1)
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            raise LayoutError([FlowError(f"cannot read layout {file}: {reason}")], p) from None
    if len(data) > MAX_FILE_BYTES:
        raise LayoutError([FlowError(f"layout {file} is larger than {MAX_FILE_BYTES} bytes")], p)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LayoutError([decode_error(file, data, exc)], p) from None
    try:
        base = p.resolve().parent
        abspath = p.resolve()
    except (OSError, RuntimeError) as exc:
        raise LayoutError([FlowError(f"cannot resolve layout path {file}: {exc}")], p) from None
    reader = LayoutReader(text, file, base)
    layout = reader.layout(abspath)
    if reader.errors or layout is None:
        errors = reader.errors or [FlowError("invalid layout", Where(file, 1, 1))]
        errors.sort(key=lambda e: (e.where.line, e.where.col) if e.where else (0, 0))
        if len(errors) > MAX_ERRORS:
            more = len(errors) - MAX_ERRORS
            errors = errors[:MAX_ERRORS] + [FlowError(f"... and {more} more errors")]
        raise LayoutError(errors, p)
    return layout


# -- planning -----------------------------------------------------------------


def plan_houses(layout: EstateLayout, houses: int | None = None) -> list[HousePlan]:
    """The house processes to start for ``houses`` cores (default: ``os.cpu_count()``).

    The manor comes first and is always exactly one house.  Entries with a
    fixed ``count`` get that many houses.  What is left of the total after
    the manor and the fixed counts is shared round-robin, in file order,
    over the ``auto`` entries -- and every auto entry gets at least one
    house, so the plan can be larger than ``houses``.  Fixed counts are
    never cut either: when they add up to more than the total, they all
    run anyway (a layout that says "4 workers" gets 4 workers on a 2-core
    test box, just slower).

    A yard is named after its entry when the entry yields one house, else
    ``name1`` .. ``nameK``.  Yard names must be unique across the plan
    (``worker`` with count 2 and an entry ``worker1`` collide):
    :class:`LayoutError` names the entry that collides.
    """
    total = houses if houses is not None else (os.cpu_count() or 1)
    if isinstance(total, bool) or not isinstance(total, int) or not 1 <= total <= MAX_PLAN:
        raise ValueError(f"houses must be a whole number in 1..{MAX_PLAN}, not {houses!r}")
    manor = layout.manor
    others = [e for e in layout.houses if e is not manor]
    fixed = sum(e.count for e in others if e.count != "auto")
    autos = [e for e in others if e.count == "auto"]
    spare = max(0, total - 1 - fixed)
    share: dict[int, int] = {}
    for i, entry in enumerate(autos):
        share[id(entry)] = max(1, spare // len(autos) + (1 if i < spare % len(autos) else 0))

    plan = [HousePlan(manor.name, manor, True)]
    for entry in others:
        n = share[id(entry)] if entry.count == "auto" else int(entry.count)
        if n == 1:
            plan.append(HousePlan(entry.name, entry, False))
        else:
            plan.extend(HousePlan(f"{entry.name}{k}", entry, False) for k in range(1, n + 1))

    seen: dict[str, HousePlan] = {}
    errors: list[FlowError] = []
    for house in plan:
        other = seen.get(house.yard)
        if other is not None:
            if not any(e.where == house.entry.where and house.yard in e.message for e in errors):
                errors.append(FlowError(
                    f"yard name {house.yard!r} of house {house.entry.name!r} is also a yard of "
                    f"house {other.entry.name!r}", house.entry.where,
                    "rename one of the entries (an entry with several houses names them NAME1, NAME2, ...)"))
        else:
            seen[house.yard] = house
    if errors:
        raise LayoutError(errors, layout.path)
    return plan


def is_layout(path: Path | str) -> bool:
    """Whether ``path`` is an estate layout rather than a YAML flow.

    ``flowcast run`` takes both; a layout is the YAML mapping with an
    ``estate`` key at the top (a flow has ``house``/``houses`` only).
    Anything unreadable is not a layout: the flow loader then reports it.
    """
    path = Path(path)
    if path.suffix not in YAML_SUFFIXES:
        return False
    try:
        with open(path, "rb") as handle:
            node = yaml.compose(handle.read(1 << 20).decode("utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(node, yaml.MappingNode) and any(
        isinstance(key, yaml.ScalarNode) and key.value == "estate" for key, _ in node.value
    )
