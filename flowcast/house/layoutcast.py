"""The ``cast:`` section of an estate layout: where the CAST cache runs, its limits, who may subscribe.

Apart from layoutread.py because it is CAST's vocabulary, checked with
CAST's own rules (:func:`flowcast.cast.check_pattern`) so that a pattern
a layout grants is one the publisher can hold; every problem is located
like the rest of a layout's.  An estate without the section runs no CAST:
its houses get no ``house.cast``, and a flow using ``cast publish`` or
``cast subscribe`` says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from flowcast.flow.errors import FlowError, Where, did_you_mean
from flowcast.flow.yamlnodes import show

if TYPE_CHECKING:
    from flowcast.cast import CastConfig
    from flowcast.house.layoutread import LayoutReader
    from flowcast.house.layoutspec import HouseEntry

__all__ = ["CAST_KEYS", "CastSpec", "read_cast"]

#: Seconds-valued keys and their bounds (a week of retention is the most a layout may ask).
#: ``lease`` (None here) is bounded by what the wire accepts, flowcast.cast.wire.MAX_LEASE, read in
#: read_cast: a longer lease would be refused by every publisher, for good, at run time.
SECONDS: dict[str, tuple[float, float | None]] = {
    "retention": (60.0, 7 * 86400.0),
    "lease": (1.0, None),
    "publish_timeout": (1.0, 3600.0),
    "publish_resend": (0.05, 600.0),
}
#: Whole-number keys and their bounds.
WHOLE = {
    "max_bytes": (1 << 20, 1 << 42),
    "window": (1, 1_000_000),
    "window_bytes": (1 << 12, 1 << 30),
    "max_subs": (1, 100_000),
}
CAST_KEYS = ("house", "dir", "subscribers", *SECONDS, *WHOLE)
SUBSCRIBER_KEYS = ("estate", "patterns")
#: The most patterns a layout may grant in all: each subscribe is checked against every one.
MAX_GRANTS = 1024


@dataclass(frozen=True)
class CastSpec:
    """Where an estate's CAST lives and what it allows."""

    #: The house entry whose house runs the cache (the manor's when the layout names none).
    house: str
    #: Where the cache (``cache.sqlite3``) and each house's inbox (``inbox-YARD.sqlite3``) are kept.
    dir: Path
    config: "CastConfig" = field(hash=False)
    where: Where | None = field(default=None, compare=False)

    @property
    def cache_path(self) -> Path:
        return self.dir / "cache.sqlite3"

    def inbox_path(self, yard: str) -> Path:
        return self.dir / f"inbox-{yard}.sqlite3"


def read_cast(reader: "LayoutReader", node: yaml.Node, houses: tuple["HouseEntry", ...], run: Path | None) -> CastSpec | None:
    """The checked ``cast:`` section, or None after reporting its problems on ``reader``.

    CAST is imported here, not with the module: reading a layout without
    the section must not load the stacks (a status reader reads layouts).
    """
    from flowcast.cast import CastConfig
    from flowcast.cast.wire import MAX_LEASE

    start = len(reader.errors)
    if reader.is_null(node):
        pairs: dict[str, Any] = {}
    else:
        found = reader.mapping(node, "cast", CAST_KEYS)
        if found is None:
            return None
        pairs = found
    values: dict[str, Any] = {}
    for key, (low, high) in SECONDS.items():
        if key in pairs:
            values[key] = reader.seconds(pairs[key][1], f"cast {key}", low, MAX_LEASE if high is None else high)
    resend, timeout = values.get("publish_resend"), values.get("publish_timeout")
    if resend is not None or timeout is not None:
        defaults = CastConfig()
        resend = resend if resend is not None else defaults.publish_resend
        timeout = timeout if timeout is not None else defaults.publish_timeout
        if resend >= timeout:
            node = pairs["publish_resend" if "publish_resend" in pairs else "publish_timeout"][1]
            reader.report(f"cast publish_resend ({resend:g} s) must be less than publish_timeout ({timeout:g} s)", node)
    for key, (low, high) in WHOLE.items():
        if key in pairs:
            values[key] = reader.integer(pairs[key][1], f"cast {key}", int(low), int(high))
    house = _house(reader, pairs.get("house"), houses)
    default_dir = run / "cast" if run is not None else None
    place = reader.directory(pairs["dir"][1], "cast dir", "cast") if "dir" in pairs else default_dir
    grants = _subscribers(reader, pairs["subscribers"][1]) if "subscribers" in pairs else {}
    if len(reader.errors) > start or house is None or place is None:
        return None
    config = CastConfig(subscribers=grants, **{k: v for k, v in values.items() if v is not None})
    return CastSpec(house, place, config, reader.where(node))



def _house(reader: "LayoutReader", pair: Any, houses: tuple["HouseEntry", ...]) -> str | None:
    manor = next((entry.name for entry in houses if entry.manor), None)
    if pair is None:
        return manor
    node = pair[1]
    name = reader.local_name(node, "cast house")
    if name is None:
        return None
    entry = next((entry for entry in houses if entry.name == name), None)
    if entry is None:
        reader.report(f"cast house {show(name)} is not a house of this layout", node,
                      did_you_mean(name, [e.name for e in houses]))
        return None
    if entry.count != 1:
        reader.errors.append(FlowError(f"cast house {show(name)} has count {entry.count!r}; the cache runs in exactly one house",
                                       reader.where(node), "give the cache's house its own entry"))
        return None
    return name


def _subscribers(reader: "LayoutReader", node: yaml.Node) -> dict[str, tuple[str, ...]]:
    from flowcast.cast import CastNameError, check_pattern

    out: dict[str, tuple[str, ...]] = {}
    if reader.is_null(node):
        return out
    total = 0
    for index, item in enumerate(reader.items(node, "cast subscribers") or ()):
        what = f"cast subscriber {index + 1}"
        pairs = reader.mapping(item, what, SUBSCRIBER_KEYS, SUBSCRIBER_KEYS)
        if pairs is None or any(key not in pairs for key in SUBSCRIBER_KEYS):
            continue  # reported by mapping()
        estate = reader.keep_name(pairs["estate"][1], f"estate of {what}")
        patterns: list[str] = []
        for pattern_node in reader.items(pairs["patterns"][1], f"patterns of {what}") or ():
            text = reader.text(pattern_node, f"a pattern of {what}")
            if text is None:
                continue
            try:
                patterns.append(check_pattern(text))
            except (CastNameError, ValueError) as error:
                reader.report(f"a pattern of {what} is {show(text)}: {error}", pattern_node,
                              "a pattern is estate/segment/..., '*' for one segment, a last '**' for the rest")
        total += len(patterns)
        if total > MAX_GRANTS:
            reader.report(f"cast subscribers grant more than {MAX_GRANTS} patterns", pairs["patterns"][1])
            return out
        if estate is not None:
            out[estate] = out.get(estate, ()) + tuple(patterns)
    return out
