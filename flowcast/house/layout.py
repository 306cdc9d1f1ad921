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

The file is composed into YAML nodes (not loaded into Python objects) so
every value keeps its position, duplicate keys are caught instead of
silently overwritten, and no YAML tag can build anything but plain values.
Names are checked with the same rules the keep and the wire use
(:func:`flowcast.transport.keep.validate_name`) so nothing a layout names
can later become a surprising path or log line.

:func:`plan_houses` turns a layout into the concrete list of house
processes for a number of cores: the manor first, then every entry's
houses with their yard names.
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

from flowcast.flow import flowords as w
from flowcast.flow.errors import FlowError, FlowErrors, decode_error, did_you_mean
from flowcast.flow.loader import FLO_SUFFIXES, YAML_SUFFIXES
from flowcast.flow.spec import Where
from flowcast.flow.yamlnodes import BOOL, INT, NULL, STR, TAG, NodeReader, node_kind, show
from flowcast.transport.keep import Acceptance, KeepError, validate_name

__all__ = [
    "ACCEPTANCES",
    "ACCESSES",
    "EstateLayout",
    "HouseEntry",
    "HousePlan",
    "LayoutError",
    "RemoteSpec",
    "RoadSpec",
    "RuleSpec",
    "Where",
    "load_layout",
    "plan_houses",
]

#: Acceptance policies of a road, as the keep knows them.
ACCEPTANCES: tuple[str, ...] = tuple(a.value for a in Acceptance)
#: What a policy rule grants or refuses.
ACCESSES: tuple[str, ...] = ("write", "read", "any")
#: Channel and yard names: short, no dots (a dot separates share path parts
#: and yard names are the stems of lane socket files).
LOCAL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}\Z")
#: One label of a DNS host name.
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_ROLE = "estate"
DEFAULT_ACCEPTANCE = "once"
#: Upper bound of an entry's fixed ``count``: a typo must not fork a million processes.
MAX_COUNT = 1024
#: Most house processes one plan may ask for (a guard against a typo like 10**9).
MAX_PLAN = 65536
#: Longest glob in a policy rule and longest path (flow, keep, run) accepted.
MAX_GLOB = 256
MAX_PATH = 4096
#: A layout is a few hundred bytes; a huge file is a mistake or an attack.
MAX_FILE_BYTES = 1 << 20
#: Longest source line quoted under an error.
_MAX_SHOWN_LINE = 200
#: Errors listed before the rest are summarised in one line.
MAX_ERRORS = 100

TOP_KEYS = ("estate", "role", "keep", "run", "roads", "policy", "houses")
#: A road's bounds on what it holds for peers (whole numbers: bytes, seconds, messages), with their ranges.
LIMIT_KEYS = {
    "hold_budget": (1 << 20, 1 << 40),  # bytes held for order or reassembly, all sessions together
    "incomplete_after": (1, 86_400),  # seconds an incomplete message waits for its next piece
    "idle_after": (10, 7 * 86_400),  # seconds of silence before a session is reaped
    "backlog_messages": (1, 10_000_000),  # messages waiting for one remote that is down
    "backlog_bytes": (1 << 16, 1 << 40),  # and their bytes
}
ROAD_KEYS = ("host", "port", "acceptance", "remotes", *LIMIT_KEYS)
REMOTE_KEYS = ("estate", "host", "port")
RULE_KEYS = ("allow", "deny", "estate", "role", "share", "tag", "channel")
HOUSE_KEYS = ("name", "flow", "house", "manor", "count")

#: Scalars whose source text is taken as text (``estate: 2024`` is the name "2024").
_TEXTUAL = {STR, INT, TAG + "float", TAG + "timestamp"}


# -- model --------------------------------------------------------------------


@dataclass(frozen=True)
class RemoteSpec:
    """An estate a road joins when it starts (the joiner side of RAET's join)."""

    estate: str
    host: str
    port: int
    where: Where | None = field(default=None, compare=False)


@dataclass(frozen=True)
class RoadSpec:
    """One UDP channel of the estate: where it listens and whom it admits/joins."""

    channel: str
    host: str
    port: int  #: 0: any free port (the bound port is reported at run time)
    acceptance: str  #: never | once | always -- what a join from an unknown key does
    remotes: tuple[RemoteSpec, ...] = ()
    where: Where | None = field(default=None, compare=False)
    #: What the road may hold for its peers (transport/budget.py): only the keys the layout gave.
    limits: tuple[tuple[str, int], ...] = ()

    def stack_options(self) -> dict[str, int]:
        """Keyword arguments for the RoadStack (its defaults stand for keys not given)."""
        return dict(self.limits)


@dataclass(frozen=True)
class RuleSpec:
    """One authorization rule for traffic arriving by road; the first match decides.

    Every pattern is an :mod:`fnmatch` glob matched against the route of the
    message: the sending ``estate`` and its ``role``, the dotted ``share``
    name, the message ``tag`` and the ``channel`` it came in on.
    """

    effect: Literal["allow", "deny"]
    access: Literal["write", "read", "any"]
    estate: str = "*"
    role: str = "*"
    share: str = "*"
    tag: str = "*"
    channel: str = "*"
    where: Where | None = field(default=None, compare=False)


@dataclass(frozen=True)
class HouseEntry:
    """Which flow (and which house of it) some of the estate's houses run.

    ``flow`` is absolute so the plan does not depend on the directory a
    supervisor happens to run in.
    """

    name: str
    flow: Path
    house: str | None = None  #: house of the flow file; None: its first
    manor: bool = False
    count: int | Literal["auto"] = 1
    where: Where | None = field(default=None, compare=False)


@dataclass(frozen=True)
class EstateLayout:
    """A validated estate layout: everything a supervisor needs to start it."""

    path: Path
    estate: str
    role: str
    keep: Path
    run: Path
    #: by channel name, in file order.  Not part of the hash (a dict cannot be hashed).
    roads: dict[str, RoadSpec] = field(default_factory=dict, hash=False)
    policy: tuple[RuleSpec, ...] = ()
    houses: tuple[HouseEntry, ...] = ()

    @property
    def manor(self) -> HouseEntry:
        """The entry whose (single) house is the manor: it owns the roads."""
        for entry in self.houses:
            if entry.manor:
                return entry
        raise ValueError("layout has no manor house")  # load_layout never builds one


@dataclass(frozen=True)
class HousePlan:
    """One house process to start: its yard name and what it runs."""

    yard: str
    entry: HouseEntry
    manor: bool


class LayoutError(FlowErrors):
    """Every problem found in a layout, each located; ``str`` lists them all.

    A :class:`~flowcast.flow.errors.FlowErrors`, so whatever already prints
    flow-script errors prints layout errors the same way.
    """

    def __init__(self, errors: list[FlowError], path: Path | str | None = None) -> None:
        super().__init__(errors)
        self.path = None if path is None else Path(path)


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
    reader = _Reader(text, file, base)
    layout = reader.layout(abspath)
    if reader.errors or layout is None:
        errors = reader.errors or [FlowError("invalid layout", Where(file, 1, 1))]
        errors.sort(key=lambda e: (e.where.line, e.where.col) if e.where else (0, 0))
        if len(errors) > MAX_ERRORS:
            more = len(errors) - MAX_ERRORS
            errors = errors[:MAX_ERRORS] + [FlowError(f"... and {more} more errors")]
        raise LayoutError(errors, p)
    return layout


def _is_wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def _host_ok(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    name = host[:-1] if host.endswith(".") else host
    return 0 < len(name) <= 253 and all(_LABEL.match(label) for label in name.split("."))


_Pairs = dict[str, tuple[yaml.Node, yaml.Node]]


class _Reader(NodeReader):
    """Walks the composed document, collecting errors instead of stopping at the first."""

    kind = "layout"

    def __init__(self, text: str, file: str, base: Path) -> None:
        super().__init__(text, file, collect=True, max_shown_line=_MAX_SHOWN_LINE)
        self.base = base

    # -- helpers: each check reports (collects) its problem and returns None

    def text(self, node: yaml.Node, what: str) -> str | None:
        """A scalar's source text (``port`` or ``2024`` as written), or None after an error."""
        if not isinstance(node, yaml.ScalarNode):
            self.report(f"{what} must be text, not a {node_kind(node)}", node)
            return None
        if node.tag == NULL:
            self.report(f"{what} has no value", node)
            return None
        if node.tag == BOOL:
            self.report(f"{what} {show(node.value)} reads as a YAML boolean", node,
                       f"write it in quotes: \"{node.value}\"")
            return None
        if node.tag not in _TEXTUAL:
            self.report(f"{what} must be text, not a {show(node.tag)} value", node)
            return None
        return str(node.value)

    def integer(self, node: yaml.Node, what: str, low: int, high: int) -> int | None:
        if not isinstance(node, yaml.ScalarNode) or node.tag != INT:
            shown = show(str(node.value)) if isinstance(node, yaml.ScalarNode) else f"a {node_kind(node)}"
            self.report(f"{what} must be a whole number, not {shown}", node)
            return None
        try:
            value = self.loader.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError):
            self.report(f"{what} is {show(str(node.value))}, not a number", node)
            return None
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            self.report(f"{what} is {show(str(node.value))}, outside {low}..{high}", node)
            return None
        return value

    def boolean(self, node: yaml.Node, what: str) -> bool | None:
        if not isinstance(node, yaml.ScalarNode) or node.tag != BOOL:
            shown = show(str(node.value)) if isinstance(node, yaml.ScalarNode) else f"a {node_kind(node)}"
            self.report(f"{what} must be true or false, not {shown}", node)
            return None
        return bool(self.loader.construct_object(node, deep=True))

    def choice(self, node: yaml.Node, what: str, choices: tuple[str, ...]) -> str | None:
        text = self.text(node, what)
        if text is None:
            return None
        if text not in choices:
            self.report(f"{what} is {show(text)}; expected one of {', '.join(choices)}", node,
                       did_you_mean(text, choices))
            return None
        return text

    def keep_name(self, node: yaml.Node, what: str) -> str | None:
        """An estate name or role: the keep's rules."""
        text = self.text(node, what)
        if text is None:
            return None
        try:
            return validate_name(text, what)
        except KeepError as exc:
            self.report(f"{what} is {show(text)}; {exc}", node)
            return None

    def local_name(self, node: yaml.Node, what: str) -> str | None:
        """A channel or yard name."""
        text = self.text(node, what)
        if text is None:
            return None
        if not LOCAL_NAME.match(text):
            self.report(f"{what} is {show(text)}; expected 1-32 letters, digits, '_' or '-', "
                       "starting with a letter or digit (no dots, spaces or separators)", node)
            return None
        return text

    def host(self, node: yaml.Node, what: str, *, wildcard: bool) -> str | None:
        text = self.text(node, what)
        if text is None:
            return None
        if not _host_ok(text):
            self.report(f"{what} is {show(text)}; expected an IP address or a host name", node)
            return None
        if not wildcard and _is_wildcard(text):
            self.report(f"{what} is {show(text)}; that is the any-address, a remote needs a real one", node)
            return None
        return text

    def glob(self, node: yaml.Node, what: str) -> str | None:
        text = self.text(node, what)
        if text is None:
            return None
        # Same limits as flowcast.routing.policy.Rule, so a loaded layout's rules always compile.
        if not text or len(text) > MAX_GLOB or _CONTROL.search(text):
            self.report(f"{what} is {show(text)}; a pattern has 1-{MAX_GLOB} characters "
                       "and no control characters", node)
            return None
        return text

    def path(self, node: yaml.Node, what: str) -> Path | None:
        """A path relative to the layout's folder (or absolute), made absolute."""
        text = self.text(node, what)
        if text is None:
            return None
        if not text or len(text) > MAX_PATH or _CONTROL.search(text):
            self.report(f"{what} is {show(text)}; a path has 1-{MAX_PATH} characters "
                       "and no control characters", node)
            return None
        try:
            return (self.base / os.path.expanduser(text)).resolve()
        except (OSError, RuntimeError, ValueError) as exc:
            self.report(f"cannot resolve {what} path {show(text)}: {exc}", node)
            return None

    def directory(self, node: yaml.Node | None, what: str, default: str) -> Path | None:
        if node is None or self.is_null(node):
            return (self.base / default).resolve()
        p = self.path(node, what)
        if p is None:
            return None
        try:
            if p.exists() and not p.is_dir():
                self.report(f"{what} {str(p)!r} exists and is not a directory", node)
                return None
        except (OSError, ValueError):
            pass  # unusual but harmless here: the supervisor reports it when it creates the dir
        return p

    # -- the document

    def layout(self, abspath: Path) -> EstateLayout | None:
        root = self.compose()
        if root is None:
            if not self.errors:
                self.report("layout file is empty: expected a mapping with 'estate' and 'houses'", None)
            return None
        if self.is_null(root):
            self.report("layout file is empty: expected a mapping with 'estate' and 'houses'", root)
            return None
        top = self.mapping(root, "the layout", TOP_KEYS, ("estate", "houses"))
        if top is None:
            return None

        estate = self.keep_name(top["estate"][1], "estate name") if "estate" in top else None
        role = DEFAULT_ROLE
        if "role" in top:
            role = self.keep_name(top["role"][1], "role") or DEFAULT_ROLE
        default_name = estate or "estate"
        keep = self.directory(top["keep"][1] if "keep" in top else None, "keep", f"keeps/{default_name}")
        run = self.directory(top["run"][1] if "run" in top else None, "run", f"run/{default_name}")
        roads = self.roads(top["roads"][1], estate) if "roads" in top else {}
        policy = self.policy(top["policy"][1]) if "policy" in top else ()
        houses = self.houses(top["houses"][1]) if "houses" in top else ()

        if self.errors or estate is None or keep is None or run is None:
            return None
        return EstateLayout(abspath, estate, role, keep, run, roads, policy, houses)

    def roads(self, node: yaml.Node, estate: str | None) -> dict[str, RoadSpec]:
        if self.is_null(node):
            return {}
        # Any channel name is a key here; local_name() judges it below.
        channels = tuple(str(k.value) for k, _ in node.value if isinstance(k, yaml.ScalarNode)) \
            if isinstance(node, yaml.MappingNode) else ()
        pairs = self.mapping(node, "roads", channels)
        out: dict[str, RoadSpec] = {}
        ports: dict[int, tuple[str, yaml.Node]] = {}
        for key_node, val_node in (pairs or {}).values():
            channel = self.local_name(key_node, "channel name")
            what = f"road {show(channel or str(key_node.value))}"
            road = self.mapping(val_node, what, ROAD_KEYS, ("port",))
            if channel is None or road is None:
                continue
            host = DEFAULT_HOST
            if "host" in road:
                host = self.host(road["host"][1], f"host of {what}", wildcard=True) or DEFAULT_HOST
            port = self.integer(road["port"][1], f"port of {what}", 0, 65535) if "port" in road else None
            if port:
                if port in ports:
                    other, other_node = ports[port]
                    self.report(f"port {port} of {what} is already the port of road {show(other)} "
                               f"(line {self.where(other_node).line})", road["port"][1])
                else:
                    ports[port] = (channel, road["port"][1])
            acceptance = DEFAULT_ACCEPTANCE
            if "acceptance" in road:
                acceptance = self.choice(road["acceptance"][1], f"acceptance of {what}", ACCEPTANCES) or acceptance
            remotes: tuple[RemoteSpec, ...] = ()
            if "remotes" in road:
                remotes = self.remotes(road["remotes"][1], what, estate)
            limits = []
            for key, (low, high) in LIMIT_KEYS.items():
                if key in road:
                    value = self.integer(road[key][1], f"{key} of {what}", low, high)
                    if value is not None:
                        limits.append((key, value))
            if port is not None:
                out[channel] = RoadSpec(channel, host, port, acceptance, remotes, self.where(key_node), tuple(limits))
        return out

    def remotes(self, node: yaml.Node, road: str, estate: str | None) -> tuple[RemoteSpec, ...]:
        if self.is_null(node):
            return ()
        items = self.items(node, f"remotes of {road}")
        out: list[RemoteSpec] = []
        seen: dict[str, yaml.Node] = {}
        for item in items or ():
            what = f"a remote of {road}"
            pairs = self.mapping(item, what, REMOTE_KEYS, ("estate", "port"))
            if pairs is None:
                continue
            name = self.keep_name(pairs["estate"][1], f"estate of {what}") if "estate" in pairs else None
            if name is not None:
                if name == estate:
                    self.report(f"{road} lists its own estate {show(name)} as a remote", pairs["estate"][1])
                    name = None
                elif name in seen:
                    self.report(f"remote estate {show(name)} listed twice in {road} "
                               f"(first at line {self.where(seen[name]).line})", pairs["estate"][1])
                    name = None
                else:
                    seen[name] = pairs["estate"][1]
            host = DEFAULT_HOST
            if "host" in pairs:
                host = self.host(pairs["host"][1], f"host of {what}", wildcard=False) or DEFAULT_HOST
            port = self.integer(pairs["port"][1], f"port of {what}", 1, 65535) if "port" in pairs else None
            if name is not None and port is not None:
                out.append(RemoteSpec(name, host, port, self.where(item)))
        return tuple(out)

    def policy(self, node: yaml.Node) -> tuple[RuleSpec, ...]:
        if self.is_null(node):
            return ()
        out: list[RuleSpec] = []
        for index, item in enumerate(self.items(node, "policy") or ()):
            what = f"policy rule {index + 1}"
            pairs = self.mapping(item, what, RULE_KEYS)
            if pairs is None:
                continue
            effects = [k for k in ("allow", "deny") if k in pairs]
            if not effects:
                self.report(f"{what} needs 'allow' or 'deny'", item, "e.g. 'allow: write' or 'deny: any'")
                continue
            if len(effects) == 2:
                self.report(f"{what} has both 'allow' and 'deny'; a rule does one", pairs["deny"][0])
                continue
            effect = effects[0]
            access = self.choice(pairs[effect][1], f"{effect!r} of {what}", ACCESSES)
            globs: dict[str, str] = {}
            ok = access is not None
            for key in ("estate", "role", "share", "tag", "channel"):
                if key in pairs:
                    value = self.glob(pairs[key][1], f"{key} of {what}")
                    if value is None:
                        ok = False
                    else:
                        globs[key] = value
            if ok:
                out.append(RuleSpec(effect, access, where=self.where(item), **globs))  # type: ignore[arg-type]
        return tuple(out)

    def houses(self, node: yaml.Node) -> tuple[HouseEntry, ...]:
        if self.is_null(node):
            self.report("no houses: list at least one, the manor", node)
            return ()
        items = self.items(node, "houses")
        if items is None:
            return ()
        if not items:
            self.report("no houses: list at least one, the manor", node)
            return ()
        entries: list[HouseEntry] = []
        names: dict[str, yaml.Node] = {}
        manor_at: yaml.Node | None = None
        manor_name = ""
        first_says_not = False
        for index, item in enumerate(items):
            what = _entry_what(item, index)
            pairs = self.mapping(item, what, HOUSE_KEYS, ("name", "flow"))
            if pairs is None:
                continue
            name = self.local_name(pairs["name"][1], f"name of {what}") if "name" in pairs else None
            if name is not None:
                if name in names:
                    self.report(f"house name {show(name)} used twice (first at line "
                               f"{self.where(names[name]).line})", pairs["name"][1])
                    name = None
                else:
                    names[name] = pairs["name"][1]
            flow = self.flow(pairs["flow"][1], f"flow of {what}") if "flow" in pairs else None
            house = None
            if "house" in pairs and not self.is_null(pairs["house"][1]):
                house = self.text(pairs["house"][1], f"house of {what}")
                if house is not None and not w.IDENT.fullmatch(house):
                    self.report(f"house of {what} is {show(house)}; a flow house name "
                               "is a letter then letters, digits or '_'", pairs["house"][1])
                    house = None
            manor = False
            if "manor" in pairs:
                said = self.boolean(pairs["manor"][1], f"manor of {what}")
                manor = bool(said)
                if said is False and index == 0:
                    first_says_not = True
                if manor:
                    if manor_at is not None:
                        self.report(f"{what} is a second manor; {show(manor_name)} already is "
                                   f"(line {self.where(manor_at).line})", pairs["manor"][1],
                                   "an estate has exactly one manor house")
                    else:
                        manor_at, manor_name = pairs["manor"][1], name or "?"
            count: int | Literal["auto"] | None = 1
            if "count" in pairs:
                count = self.count(pairs["count"][1], f"count of {what}")
            if name is not None and flow is not None and count is not None:
                entries.append(HouseEntry(name, flow, house, manor, count, self.where(item)))
        if manor_at is None:
            if first_says_not:
                self.report("no manor: the first house says 'manor: false' and no other says "
                           "'manor: true'", items[0], "mark one house 'manor: true'")
            elif entries and entries[0].where == self.where(items[0]):
                entries[0] = _replace_manor(entries[0])
        for entry in entries:
            if entry.manor and entry.count != 1:
                self.errors.append(FlowError(
                    f"manor house {show(entry.name)} has count {entry.count!r}; the manor is exactly one house",
                    entry.where, "give the other houses of this flow their own entry"))
        return tuple(entries)

    def count(self, node: yaml.Node, what: str) -> int | Literal["auto"] | None:
        if isinstance(node, yaml.ScalarNode) and node.tag == STR:
            if node.value == "auto":
                return "auto"
            self.report(f"{what} must be a whole number or 'auto', not {show(str(node.value))}", node)
            return None
        return self.integer(node, what, 1, MAX_COUNT)

    def flow(self, node: yaml.Node, what: str) -> Path | None:
        p = self.path(node, what)
        if p is None:
            return None
        suffixes = FLO_SUFFIXES + YAML_SUFFIXES
        if p.suffix.lower() not in suffixes:
            self.report(f"{what} is not a flow file: {show(str(node.value))}", node,
                       f"flow files end in {', '.join(suffixes)}")
            return None
        try:
            exists, is_file = p.exists(), p.is_file()
        except (OSError, ValueError) as exc:
            self.report(f"cannot check {what} {show(str(node.value))}: {exc}", node)
            return None
        if not exists:
            self.report(f"{what} not found: {show(str(node.value))} (looked for {show(str(p), 200)})", node)
            return None
        if not is_file:
            self.report(f"{what} is not a file: {show(str(node.value))}", node)
            return None
        return p


def _entry_what(item: yaml.Node, index: int) -> str:
    """How errors name a house entry: by its name when it has a good one."""
    if isinstance(item, yaml.MappingNode):
        for key, value in item.value:
            if (isinstance(key, yaml.ScalarNode) and key.value == "name"
                    and isinstance(value, yaml.ScalarNode) and value.tag in _TEXTUAL
                    and LOCAL_NAME.match(str(value.value))):
                return f"house {show(str(value.value))}"
    return f"house entry {index + 1}"


def _replace_manor(entry: HouseEntry) -> HouseEntry:
    return HouseEntry(entry.name, entry.flow, entry.house, True, entry.count, entry.where)


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
