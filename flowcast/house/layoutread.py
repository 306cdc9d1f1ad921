"""Reading a composed layout: every key and value checked, every problem kept.

The located YAML reader (flow/yamlnodes.py, shared with YAML flows)
composes the file and reads its mappings and lists; this reader checks
what a layout's values mean -- names by the keep's rules, hosts, ports,
globs, paths, the manor -- collecting every problem, so a person fixes a
layout in one pass.  Nothing here starts or opens anything but the flow
files a layout names (to check they exist).
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from pathlib import Path
from typing import Literal

import yaml

from flowcast.flow import flowords as w
from flowcast.flow.errors import FlowError, did_you_mean
from flowcast.flow.loader import FLO_SUFFIXES, YAML_SUFFIXES
from flowcast.flow.yamlnodes import BOOL, INT, NULL, STR, TAG, NodeReader, node_kind, show
from flowcast.house.layoutcast import read_cast
from flowcast.house.layoutcausal import read_causal
from flowcast.house.layoutexport import read_export
from flowcast.house.layoutshares import read_shares
from flowcast.house.layoutspec import (
    ACCEPTANCES,
    ACCESSES,
    DEFAULT_ACCEPTANCE,
    DEFAULT_HOST,
    DEFAULT_ROLE,
    HOUSE_KEYS,
    LIMIT_KEYS,
    LOCAL_NAME,
    MAX_COUNT,
    MAX_GLOB,
    MAX_PATH,
    PERIOD,
    DRAIN,
    REMOTE_KEYS,
    ROAD_KEYS,
    RULE_KEYS,
    TOP_KEYS,
    EstateLayout,
    HouseEntry,
    RemoteSpec,
    RoadSpec,
    RuleSpec,
)
from flowcast.transport.keep import KeepError, validate_name

__all__ = ["LayoutReader"]

#: One label of a DNS host name.
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: Longest source line quoted under an error.
_MAX_SHOWN_LINE = 200

#: Scalars whose source text is taken as text (``estate: 2024`` is the name "2024").
_TEXTUAL = {STR, INT, TAG + "float", TAG + "timestamp"}


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


class LayoutReader(NodeReader):
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

    def seconds(self, node: yaml.Node, what: str, low: float, high: float) -> float | None:
        """A number of seconds in ``low..high`` (an int or a float), or None after reporting why not."""
        if not isinstance(node, yaml.ScalarNode) or node.tag not in (INT, TAG + "float"):
            shown = show(str(node.value)) if isinstance(node, yaml.ScalarNode) else f"a {node_kind(node)}"
            self.report(f"{what} must be a number of seconds, not {shown}", node)
            return None
        try:
            value = float(self.loader.construct_object(node, deep=True))
        except (yaml.YAMLError, ValueError, TypeError):
            self.report(f"{what} is {show(str(node.value))}, not a number", node)
            return None
        if not math.isfinite(value) or not low <= value <= high:
            self.report(f"{what} is {show(str(node.value))}, outside {low:g}..{high:g} seconds", node)
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
        cast = read_cast(self, top["cast"][1], houses, run) if "cast" in top else None
        causal = read_causal(self, top["causal"][1], cast, run, estate, "cast" in top) if "causal" in top else None
        period = self.seconds(top["period"][1], "period", *PERIOD) if "period" in top else None
        drain = self.seconds(top["drain"][1], "drain", *DRAIN) if "drain" in top else None
        shares = read_shares(self, top["shares"][1]) if "shares" in top else None
        export = None
        if "export" in top:
            export = read_export(self, top["export"][1], run, estate, top["estate"][1] if "estate" in top else None)

        if self.errors or estate is None or keep is None or run is None:
            return None
        return EstateLayout(abspath, estate, role, keep, run, roads, policy, houses, cast, causal, export, period, drain, shares)

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
            drain = self.seconds(pairs["drain"][1], f"drain of {what}", *DRAIN) if "drain" in pairs else None
            if name is not None and flow is not None and count is not None:
                entries.append(HouseEntry(name, flow, house, manor, count, self.where(item), drain))
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
    return HouseEntry(entry.name, entry.flow, entry.house, True, entry.count, entry.where, entry.drain)
